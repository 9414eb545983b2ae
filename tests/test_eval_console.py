"""What `groupwise eval` says on the console: nothing but results under --quiet, the checking
mode that judged the answers (re-graded ones too), where benchmark data is looked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from groupwise.cli import main as cli

SRC = Path(__file__).resolve().parents[1] / "src"


def groupwise(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "groupwise", *args],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_quiet_hides_the_model_loading_bar_and_results_name_the_checking_mode(
    tmp_path: Path,
) -> None:
    out = str(tmp_path / "e")
    flags = ["--model", "tiny-random", "--benchmarks", "gsm8k", "--limit", "2", "--n", "1"]
    flags += ["--k", "1", "--max-new-tokens", "2", "--checking", "groupwise", "--prompt", "boxed"]
    done = groupwise("eval", *flags, "--quiet", "--output", out)
    assert done.returncode == 0, done.stderr
    assert "Loading weights" not in done.stderr and "it/s" not in done.stderr, done.stderr
    assert "prompt boxed, checking groupwise" in done.stdout
    assert "prompt boxed, checking groupwise" in (tmp_path / "e" / "results.md").read_text()
    done = groupwise("eval", "--output", out, "--regrade", "--checking", "amir_eval")
    assert done.returncode == 0, done.stderr
    assert "prompt boxed, checking amir_eval" in done.stdout
    assert "re-graded under --checking amir_eval: wrote" in done.stdout
    regraded = (tmp_path / "e" / "regrade-amir_eval" / "results.md").read_text()
    assert "checking amir_eval" in regraded


def test_data_dir_help_names_the_folders_looked_in(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: $GROUPWISE_DATA, else ../shared/data beside the working folder" in text
