"""`groupwise eval --model RUN_FOLDER` evaluates what the run was trained for, with the k of
pass@k following --n (docs/guides/evaluate.md, "Evaluate a training run")."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from groupwise.evaluation.command import add_arguments, config_from_args

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SRC = ROOT / "src"


def fake_run(folder: Path, data: dict) -> Path:
    """A training run folder as `groupwise train` leaves it, as far as eval reads it before
    loading: config.yaml (model, data, the sampling settings), metrics.jsonl, final/model."""
    config = {
        "model": {"name": "tiny-random"},
        "data": {"prompt": "plain", **data},
        "reward": {"checking": "groupwise"},
        "rollout": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 96},
    }
    (folder / "final" / "model").mkdir(parents=True)
    (folder / "final" / "model" / "config.json").write_text("{}")
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "metrics.jsonl").write_text('{"step": 1}\n')
    return folder


def eval_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([*argv, "--output", "unused"])


TESTBED = {"benchmark": "arith", "split": "train", "options": {"level": "mid", "seed": 1}}


@pytest.mark.parametrize(
    ("data", "benchmarks", "source"),
    [
        # no data.heldout: the test split of the training benchmark, its options kept
        ({**TESTBED, "heldout": {}}, ("arith:test@level=mid@seed=1",), "data.benchmark"),
        # data.heldout wins, with its own split and options
        (
            {
                **TESTBED,
                "heldout": {"benchmark": "arith", "split": "test", "options": {"level": "long"}},
            },
            ("arith:test@level=long",),
            "data.heldout",
        ),
        # a mix: each part's test split once; a part without one (dapo_math_17k) is left out
        (
            {
                "mix": [
                    {"benchmark": "math", "split": "train"},
                    {"benchmark": "dapo_math_17k", "split": "train", "size": 10},
                    {"benchmark": "gsm8k", "split": "train"},
                    {"benchmark": "math", "split": "train", "seed": 3},
                ]
            },
            ("math:test", "gsm8k:test"),
            "data.mix",
        ),
    ],
)
def test_a_run_folder_is_evaluated_on_what_it_was_trained_for(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    data: dict,
    benchmarks: tuple[str, ...],
    source: str,
) -> None:
    run = fake_run(tmp_path / "run", data)
    config = config_from_args(eval_args("--model", str(run), "--n", "2"))
    assert config.benchmarks == benchmarks
    assert config.ks == (1, 2) and config.n == 2  # the preset's (1, 2, 4) would not fit n = 2
    assert (config.prompt, config.checking, config.max_new_tokens) == ("plain", "groupwise", 96)
    printed = capsys.readouterr().err
    assert f"--benchmarks {','.join(benchmarks)} ({source}" in printed
    assert "--k 1,2 (1, 2, 4, ... up to --n 2)" in printed


def test_the_k_follow_n_for_a_run_and_a_given_k_or_benchmark_wins(tmp_path: Path) -> None:
    run = str(fake_run(tmp_path / "run", TESTBED))
    assert config_from_args(eval_args("--model", run)).ks == (1, 2, 4, 8)  # the preset's n 8
    assert config_from_args(eval_args("--model", run, "--n", "6")).ks == (1, 2, 4, 6)
    assert config_from_args(eval_args("--model", run, "--n", "1")).ks == (1,)
    given = config_from_args(eval_args("--model", run, "--n", "4", "--k", "2"))
    assert given.ks == (2,)
    named = config_from_args(eval_args("--model", run, "--benchmarks", "gsm8k"))
    assert named.benchmarks == ("gsm8k",)


def groupwise(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`groupwise ARGS...` in a subprocess, with this checkout's source first."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "groupwise", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


# Runs eval's command line to the point where the model would load and says whether torch is
# imported by then: a refusal must come before any of it.
_BEFORE_LOADING = """
import sys
from groupwise.cli import main
status = main(sys.argv[1:])
print("torch" in sys.modules, status)
"""


def refusal(tmp_path: Path, *argv: str) -> str:
    """The one line `groupwise eval ARGV` refuses with, checked to come before torch loads."""
    done = subprocess.run(
        [sys.executable, "-c", _BEFORE_LOADING, "eval", *argv, "--output", str(tmp_path / "e")],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["False", "2"], (done.stdout, done.stderr)
    lines = [
        line
        for line in done.stderr.splitlines()
        if not line.startswith("groupwise eval: evaluating")
    ]
    assert len(lines) == 1 and lines[0].startswith("groupwise eval: "), done.stderr
    assert not (tmp_path / "e").exists()
    return lines[0]


def test_a_k_above_n_and_a_run_with_no_test_split_are_one_line_before_loading(
    tmp_path: Path,
) -> None:
    run = str(fake_run(tmp_path / "run", TESTBED))
    line = refusal(tmp_path, "--model", run, "--n", "2", "--k", "1,4")
    assert line == "groupwise eval: --k: must be integers in 1..n=2, got [1, 4]"
    # the preset's k with a smaller --n, for a model that is no run: the same line, as early
    line = refusal(tmp_path, "--model", "tiny-random", "--n", "2")
    assert line == "groupwise eval: --k: must be integers in 1..n=2, got [1, 2, 4]"
    dapo = fake_run(tmp_path / "dapo", {"benchmark": "dapo_math_17k", "split": "train"})
    line = refusal(tmp_path, "--model", str(dapo))
    assert line.startswith("groupwise eval: --benchmarks: the training run ")
    assert "trained on dapo_math_17k:train, which leaves no test split" in line
    assert line.endswith("pass --benchmarks NAME[:SPLIT]")


def guide_commands() -> tuple[list[str], str]:
    """The commands of the guide's "Evaluate a training run" and the line it says eval prints."""
    text = (ROOT / "docs" / "guides" / "evaluate.md").read_text(encoding="utf-8")
    section = text[text.index("### Evaluate a training run") : text.index("### Re-grade")]
    lines = re.findall(r"^    (groupwise .*)$", section, re.M)
    commands = [line for line in lines if not line.startswith("groupwise eval: ")]
    printed = [line for line in lines if line.startswith("groupwise eval: ")]
    assert len(commands) == 2 and len(printed) == 1, lines
    return commands, printed[0]


@pytest.mark.slow
def test_the_guides_training_run_example_runs_as_written(tmp_path: Path) -> None:
    """The guide's two commands, in a folder with configs/ beside, print what the guide says and
    evaluate arith only; the done-when of the run folder with a small --n, no --k, too."""
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (train, evaluate), printed = guide_commands()
    done = groupwise(*shlex.split(train)[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    done = groupwise(*shlex.split(evaluate)[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert printed in done.stderr.splitlines()
    results = json.loads((tmp_path / "runs" / "eval-trial" / "results.json").read_text())
    benchmarks = [key for key in results if key != "config"]
    assert benchmarks == ["arith:test@level=mid@size=2000@seed=1"]
    assert results[benchmarks[0]]["problems"] == 40
    assert results["config"]["ks"] == [1, 2, 4]
    done = groupwise(
        "eval",
        "--model",
        "runs/trial",
        "--n",
        "2",
        "--limit",
        "2",
        "--quiet",
        "--output",
        "e2",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "e2" / "results.json").read_text())
    assert [key for key in results if key != "config"] == benchmarks
    assert results["config"]["ks"] == [1, 2]
