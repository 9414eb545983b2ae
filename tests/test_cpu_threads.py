"""The CPU threads a groupwise command takes (groupwise.cpu_threads; docs/guides/train.md, "A busy
machine"), and how the command line reads options after positional arguments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from groupwise.cpu_threads import core_list, settle_threads

ROOT = Path(__file__).resolve().parents[1]


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS"):
        env.pop(key, None)
    return env


def test_unset_settings_become_passive_waiting_and_the_allowed_cores() -> None:
    env: dict[str, str] = {}
    line = settle_threads(env)
    cores = sorted(os.sched_getaffinity(0))
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(len(cores))}
    assert line == (
        f"{len(cores)} threads on cores {core_list(cores)} of {os.cpu_count()} "
        "(OMP_WAIT_POLICY=PASSIVE)"
    )


def test_what_the_user_set_is_kept() -> None:
    env = {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "7"}
    line = settle_threads(env)
    assert env == {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "7"}
    assert line.startswith("7 threads on cores ") and line.endswith("(OMP_WAIT_POLICY=ACTIVE)")


def test_core_list_runs() -> None:
    assert core_list([5, 0, 1, 2]) == "0-2,5"
    assert core_list([3]) == "3"
    with pytest.raises(ValueError):
        core_list([])


def test_torch_takes_one_thread_per_allowed_core() -> None:
    """A process limited to one core (its affinity, as taskset sets it) runs torch on one
    thread, whatever the machine has: the count comes from the affinity, set before torch
    loads."""
    code = (
        "from groupwise.cpu_threads import settle_threads; settle_threads(); "
        "import torch; print(torch.get_num_threads())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "1"


def test_the_command_says_what_it_took_once_its_arguments_are_checked(tmp_path: Path) -> None:
    """`groupwise train` names its threads on stdout when the run starts; a refused command
    stays one line; options may follow overrides (--print-config after --resume and one)."""
    printed = _train(["--resume", "train.max_steps=5", "--print-config"], tmp_path / "printed")
    assert printed.returncode == 0, printed.stderr
    assert "\n  max_steps: 5" in printed.stdout
    refused = _train(["rollout.temperature=0"], tmp_path / "refused")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    started = _train([], tmp_path / "run")
    assert started.returncode == 0, started.stderr
    cores = sorted(os.sched_getaffinity(0))
    line = f"groupwise train: {len(cores)} threads on cores {core_list(cores)} of "
    assert started.stdout.startswith(line), started.stdout
    assert "(OMP_WAIT_POLICY=PASSIVE)\n" in started.stdout


def _train(arguments: list[str], output: Path) -> subprocess.CompletedProcess[str]:
    """`groupwise train` of the tiny model for one short step, output in `output`."""
    tiny = [
        "model.name=tiny-random",
        "data.benchmark=arith",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "train.max_steps=1",
        "train.progress=false",
        "train.eval_every=0",
        f"train.output_dir={output}",
    ]
    return subprocess.run(
        [sys.executable, "-m", "groupwise.cli", "train", *tiny, *arguments],
        cwd=ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
