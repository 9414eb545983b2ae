"""Train, then evaluate what was trained, as a newcomer types it: every test drives
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


def groupwise(
    *args: str,
    cwd: Path | None = None,
    replace_env: dict[str, str] | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """`groupwise ARGS...` as a user runs it, in `cwd`, with the environment `replace_env`
    (default: this one) updated by `env` and the tests' plugins importable; its output."""
    base = dict(os.environ if replace_env is None else replace_env)
    path = os.pathsep.join([str(SRC), str(TESTS), base.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "groupwise", *args],
        env={**base, "PYTHONPATH": path, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
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
    # item 8: the run draws its own figure at the end
    assert f"figure:     {run / 'run.png'}" in done.stdout and (run / "run.png").is_file()


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


# --- items 5 and 6: offline failures are fast, errors are one line, the data folder is found ----


def test_a_missing_run_folder_as_model_fails_at_once(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    started = time.monotonic()
    done = groupwise(
        "eval",
        "--model",
        "runs/nope",
        "--benchmarks",
        "gsm8k",
        "--output",
        "runs/eval",
        cwd=tmp_path,
    )
    seconds = time.monotonic() - started
    assert "--model: unknown model 'runs/nope': no such folder" in one_line_error(done, "eval")
    assert seconds < 10, seconds  # no hub retries, no torch import
    assert not (tmp_path / "runs" / "eval").exists()


def test_an_uncached_hub_model_out_of_reach_is_one_line_without_retries(tmp_path: Path) -> None:
    # The hub "answers" at a port where nothing listens; HF_HUB_OFFLINE is not set.
    env = {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty hub cache
    out = str(tmp_path / "eval")
    done = groupwise(
        "eval", "--model", "org/model", "--benchmarks", "gsm8k", "--output", out, **env
    )
    line = one_line_error(done, "eval")
    assert "unknown model 'org/model'" in line and "not in the hub cache" in line
    assert "127.0.0.1:9 cannot be reached" in line
    assert "Retry" not in done.stderr


def test_report_and_analyze_errors_are_one_line(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    done = groupwise("report", "runs/nope", "--output", out + ".md", cwd=tmp_path)
    assert "run 'nope': runs/nope does not exist" in one_line_error(done, "report")
    done = groupwise("analyze", "perplexity", "base=runs/nope", "--output", out, cwd=tmp_path)
    assert "no samples.jsonl in runs/nope" in one_line_error(done, "analyze")
    done = groupwise("report", "runs/nope", cwd=tmp_path)
    assert "is runs/nope a training run folder?" in one_line_error(done, "report")


def test_an_override_typo_is_blamed_on_the_command_line_with_a_suggestion(tmp_path: Path) -> None:
    config = str(TESTS.parent / "configs" / "testbed_arith.yaml")
    run = f"train.output_dir={tmp_path / 'run'}"
    done = groupwise("train", "--config", config, "algorithm.advantge=std", run)
    line = one_line_error(done, "train")
    assert line.startswith("groupwise train: command line, override 'algorithm.advantge=std': ")
    assert "unknown key 'algorithm.advantge' (did you mean 'algorithm.advantage'?)" in line
    assert "testbed_arith.yaml" not in line
    # a mistake in the file itself is still the file's
    typo = tmp_path / "typo.yaml"
    typo.write_text("rollout:\n  group_sise: 4\n")
    done = groupwise("train", "--config", str(typo), "train.max_steps=2", run)
    line = one_line_error(done, "train")
    assert f"{typo}: unknown key 'rollout.group_sise' (did you mean 'rollout.group_size'?)" in line


@pytest.mark.slow
def test_train_and_eval_find_the_shared_data_folder_beside_the_working_folder(
    tmp_path: Path, data_dir: Path
) -> None:
    # A checkout beside shared/data whose gsm8k test split holds 3 problems; no GROUPWISE_DATA.
    gsm8k = tmp_path / "shared" / "data" / "gsm8k"
    gsm8k.mkdir(parents=True)
    lines = (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[:3]
    (gsm8k / "test.jsonl").write_text("\n".join(lines) + "\n")
    (gsm8k / "train.jsonl").write_text("\n".join(lines) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "GROUPWISE_DATA"}
    flags = ["--model", "tiny-random", "--benchmarks", "gsm8k", "--n", "1", "--k", "1"]
    flags += ["--max-new-tokens", "2", "--quiet", "--output", "eval"]
    done = groupwise("eval", *flags, cwd=work, replace_env=env)
    assert done.returncode == 0, done.stderr
    assert sum(1 for _ in (work / "eval" / "samples.jsonl").open()) == 3
    done = groupwise(*tiny_run(work / "run", "data.split=train"), cwd=work, replace_env=env)
    assert done.returncode == 0, done.stderr


# --- items 1 and 2: evaluate a run as it was trained; re-grade without sampling ---------------


@pytest.mark.slow
def test_eval_of_a_run_folder_takes_its_weights_and_settings_and_regrades(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "trial"
    assert groupwise(*tiny_run(run)).returncode == 0
    flags = ["--benchmarks", "gsm8k", "--limit", "2", "--n", "2", "--k", "1", "--quiet"]
    done = groupwise("eval", "--model", "runs/trial", *flags, "--output", "e1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    taken = "from its config.yaml: --prompt boxed --checking groupwise --temperature 1.0"
    assert f"evaluating runs/trial/final/adapter of the training run runs/trial; {taken}" in (
        done.stderr
    )
    assert "warning" not in done.stderr
    saved = json.loads((tmp_path / "e1" / "config.json").read_text())
    assert (saved["model"], saved["prompt"], saved["checking"]) == (
        "tiny-random",
        "boxed",
        "groupwise",
    )
    assert saved["max_new_tokens"] == 4 and saved["adapter"] == str(run / "final" / "adapter")
    # a checkpoint folder, with a prompt the model was not trained with: one warning
    step = "runs/trial/checkpoints/step-1"
    done = groupwise(
        "eval", "--model", step, *flags, "--prompt", "amir", "--output", "e2", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "--prompt amir (trained with boxed)" in warnings[0]
    assert "pass --prompt boxed" in warnings[0]
    saved = json.loads((tmp_path / "e2" / "config.json").read_text())
    assert saved["adapter"] == str(run / "checkpoints" / "step-1" / "adapter")
    # re-grade e1 under another checking mode: a new results file, the samples untouched
    samples = (tmp_path / "e1" / "samples.jsonl").read_bytes()
    regrade = ("eval", "--output", "e1", "--regrade", "--checking", "amir_eval")
    done = groupwise(*regrade, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    target = tmp_path / "e1" / "regrade-amir_eval"
    results = json.loads((target / "results.json").read_text())
    assert results["config"]["checking"] == "amir_eval" and results["gsm8k"]["problems"] == 2
    verdicts = [json.loads(line) for line in (target / "verdicts.jsonl").open()]
    assert len(verdicts) == 4 and {v["verdict"] for v in verdicts} <= {
        "no_answer",
        "wrong",
        "correct",
    }
    assert (tmp_path / "e1" / "samples.jsonl").read_bytes() == samples
