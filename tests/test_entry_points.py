"""Every entry point (`groupwise`, each `python -m groupwise...` module) refuses a user's mistake
the same way: one line on stderr naming the command, exit status 2, no traceback, and nothing
written (groupwise.entry; docs/design.md, "Choices already made")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# `python -m MODULE ARGS` as a user runs it, with `import verl` failing: no entry point may need
# verl (or any optional engine) to say what is wrong with its arguments.
_RUN_MODULE = """
import runpy, sys
sys.modules["verl"] = None
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def run_module(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _RUN_MODULE, module, *args],
        env={**os.environ, "PYTHONPATH": str(SRC), "GROUPWISE_DEBUG": "0"},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def entry_modules() -> set[str]:
    """The modules that run as `python -m`: those with a __main__ block, and the package's."""
    found = {"groupwise"}
    for path in SRC.rglob("*.py"):
        if re.search(r'^if __name__ == "__main__":', path.read_text(encoding="utf-8"), re.M):
            found.add(".".join(path.relative_to(SRC).with_suffix("").parts))
    return found


# (module, bad arguments, the prefix of its error line, what the line must say); the modules
# that import torch at start (summary, sft) get one case each: each start takes seconds.
VERL_DATA = "groupwise.integrations.verl.data"
BAD_ARGUMENTS: list[tuple[str, list[str], str, str]] = [
    ("groupwise", ["trian"], "groupwise", "invalid choice: 'trian'"),
    ("groupwise", ["eval", "--k", "one"], "groupwise eval", "expected comma-separated integers"),
    ("groupwise", ["analyze", "margin", "--output", "o"], "groupwise analyze margin", "required"),
    ("groupwise.cli", ["report", "--no-such-flag"], "groupwise report", "required: RUN_DIR"),
    ("groupwise", ["report", "r", "--png", "x.csv"], "groupwise report", "x.csv: the figure is"),
    ("groupwise", ["summary", "r", "--png", "x.csv"], "groupwise summary", "x.csv: the figure is"),
    ("groupwise.train.summary", ["runs/nope"], "python -m groupwise.train.summary", "runs/nope"),
    ("groupwise.sft", ["--output", "o", "stepz=3"], "python -m groupwise.sft", "stepz"),
    (VERL_DATA, ["gsm9k", "train", "x.parquet"], f"python -m {VERL_DATA}", "benchmark 'gsm9k'"),
    (VERL_DATA, ["gsm8k", "dev", "x.parquet"], f"python -m {VERL_DATA}", "no split 'dev'"),
    (VERL_DATA, ["gsm8k", "test", "x", "--data-dir", "d"], f"python -m {VERL_DATA}", "x: what is"),
    (VERL_DATA, ["gsm8k", "test", "x.parquet", "--data-dir", "d"], f"python -m {VERL_DATA}", "d"),
    (VERL_DATA, ["gsm8k", "train", "x.csv"], f"python -m {VERL_DATA}", "output x.csv: what is"),
    (VERL_DATA, ["gsm8k", "train"], f"python -m {VERL_DATA}", "required: output"),
]


def test_every_entry_point_is_walked() -> None:
    assert entry_modules() == {module for module, *_ in BAD_ARGUMENTS}


CASES = [
    pytest.param(module, args, prefix, said, id=f"{module}:{' '.join(args)}")
    for module, args, prefix, said in BAD_ARGUMENTS
]


@pytest.mark.parametrize(("module", "args", "prefix", "said"), CASES)
def test_a_bad_argument_is_one_line_and_exit_2(
    tmp_path: Path, module: str, args: list[str], prefix: str, said: str
) -> None:
    done = run_module(module, *args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"{prefix}: ") and said in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_verl_data_command_writes_a_parquet_file_without_verl(tmp_path: Path) -> None:
    done = run_module(
        "groupwise.integrations.verl.data",
        "gsm8k",
        "test",
        "out/x.parquet",
        "--limit",
        "2",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "out/x.parquet: 2 problems"
    assert (tmp_path / "out" / "x.parquet").read_bytes()[:4] == b"PAR1"
