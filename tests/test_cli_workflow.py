"""Train, then evaluate what was trained, as a newcomer types it (issue 34): every test drives
`groupwise` in a subprocess, as a terminal would, and reads what it printed and left on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from groupwise.train.checkpoint import checkpoint_problem

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def groupwise(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """`groupwise ARGS...` as a user runs it (the tests' plugins importable); its output."""
    path = os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "groupwise", *args],
        env={**os.environ, "PYTHONPATH": path, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tiny_run(run: Path, *extra: str) -> list[str]:
    """Arguments of `groupwise train` for a run of a few seconds on tiny-random."""
    return [
        "train",
        "model.name=tiny-random",
        "data.prompt=boxed",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "train.micro_batch_size=2",
        "train.max_steps=1",
        "train.progress=false",
        "reward.plugins=[reward_plugin]",
        "reward.weights={text_hash: 1.0}",
        f"train.output_dir={run}",
        *extra,
    ]


def one_line_error(done: subprocess.CompletedProcess[str], command: str) -> str:
    """The one line a user error prints (exit 2, no traceback)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"groupwise {command}: "), done.stderr
    return lines[0]


# --- item 3: a start that fails before its first step blocks nothing ---------------------------


@pytest.mark.slow
def test_a_failed_start_leaves_nothing_that_blocks_the_corrected_command(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "trial"
    missing = tmp_path / "missing" / "model"
    failed = groupwise(*tiny_run(run, f"model.name={missing}"))
    assert f"unknown model '{missing}'" in one_line_error(failed, "train")
    assert not run.exists()  # the start created the folder, so it removed it
    # a missing data folder, into a folder the user made beforehand: it stays, empty
    run.mkdir(parents=True)
    failed = groupwise(*tiny_run(run, f"data.data_dir={tmp_path / 'no-data'}"))
    assert str(tmp_path / "no-data") in one_line_error(failed, "train")
    assert sorted(p.name for p in run.iterdir()) == []
    # the corrected command, as typed: no --overwrite, no --resume
    done = groupwise(*tiny_run(run))
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").open()] == [1]


@pytest.mark.slow
def test_a_start_killed_before_its_first_step_is_taken_over(tmp_path: Path) -> None:
    # What a start killed while loading its model leaves: config.yaml, the lock, empty logs.
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("model:\n  name: /a/typo\n")
    (run / ".lock").write_text("12345\n")
    (run / "metrics.jsonl").write_text("")
    done = groupwise(*tiny_run(run, "optim.lr=0.001"), "--resume")
    assert done.returncode == 0, done.stderr
    assert "held a start that never finished a step" in done.stderr
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").open()] == [1]


@pytest.mark.slow
def test_a_folder_with_a_logged_step_stays_protected(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert groupwise(*tiny_run(run)).returncode == 0
    (run / "final").rename(tmp_path / "final")
    for entry in (run / "checkpoints").iterdir():
        entry.rename(tmp_path / entry.name)  # only metrics.jsonl's step 1 is left as progress
    before = sorted(p.name for p in run.iterdir())
    refused = groupwise(*tiny_run(run, "optim.lr=0.001"))
    assert "is not empty" in one_line_error(refused, "train")
    changed = groupwise(*tiny_run(run, "optim.lr=0.001"), "--resume")
    assert "these differ: optim.lr" in one_line_error(changed, "train")
    assert sorted(p.name for p in run.iterdir()) == before


# --- item 4: Ctrl-C is a clean stop ----------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_stops_cleanly_with_a_checkpoint(tmp_path: Path) -> None:
    # A terminal's Ctrl-C sends SIGINT to every process of the foreground group: the run and its
    # answer-checking workers. The run is started as a group of its own, as a shell's job is.
    run = tmp_path / "run"
    path = os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])
    args = tiny_run(run, "train.max_steps=500", "train.save_every=1000", "reward.workers=2")
    process = subprocess.Popen(
        [sys.executable, "-m", "groupwise", *args],
        env={**os.environ, "PYTHONPATH": path},
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text():
            assert process.poll() is None and time.monotonic() < deadline, "the run ended early"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    step = sum(1 for _ in (run / "metrics.jsonl").open())
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(f"groupwise train: stopped by SIGINT at step {step}")
    )
    assert err.rstrip().endswith("--resume")
    assert checkpoint_problem(run / "checkpoints" / f"step-{step}") is None
