"""The README's main command, scripts/quickstart.sh, end to end as shipped (configs/quickstart.yaml,
seed 0): three runs (GRPO, AMIR-GRPO, LENS) from the shipped policy, each evaluated on held-out
problems, then the comparison table and figure; run again, it continues the finished runs and
prints them again. The table it prints is the README's, row for row, on the machine the README
names; elsewhere, where float rounding differs, each difference within the README's interval."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

from groupwise.train.config_file import load_config
from groupwise.train.heldout import read_heldout

REPO = Path(__file__).resolve().parents[1]


def test_the_preset_is_the_documented_run() -> None:
    config = load_config(REPO / "configs" / "quickstart.yaml")
    assert (config.model.name, config.data.benchmark, config.data.options["level"]) == (
        "arith-base",
        "arith",
        "mid",
    )
    assert (config.train.max_steps, config.train.eval_every) == (50, 25)
    assert config.data.heldout == {
        "benchmark": "arith",
        "split": "test",
        "options": {"level": "mid", "size": 200},
    }
    assert not config.algorithm.amir and config.algorithm.advantage == "grpo"
    gsm8k = load_config(REPO / "configs" / "quickstart_gsm8k.yaml")
    assert (gsm8k.model.name, gsm8k.data.benchmark, gsm8k.algorithm.amir) == (
        "smollm2-135m-instruct",
        "gsm8k",
        True,
    )


# The README's sentence that names the platform its table was measured on.
PLATFORM = re.compile(
    r"torch\s+(?P<torch>[\d.]+),\s+CPU\s+kernels\s+(?P<kernels>\w+),\s+(?P<threads>\d+)\s+threads"
)
INTERVAL = re.compile(r"(?P<delta>[+-][\d.]+) \[(?P<low>[+-][\d.]+), (?P<high>[+-][\d.]+)\]")


def quickstart(runs: Path) -> str:
    """stdout of `bash scripts/quickstart.sh` with its runs in `runs` (asserts exit 0)."""
    done = subprocess.run(
        ["bash", "scripts/quickstart.sh"],
        cwd=REPO,
        env={**os.environ, "RUNS": str(runs)},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def table_rows(text: str) -> list[str]:
    """The comparison table in `text`: its header, rule and one row per method."""
    lines = text[text.index("| method |") :].splitlines()
    return lines[: next((i for i, line in enumerate(lines) if not line.startswith("|")), None)]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The quickstart as shipped, once for this module: (its runs folder, what it printed)."""
    runs = tmp_path_factory.mktemp("quickstart") / "qs"
    return runs, quickstart(runs)


@pytest.mark.slow
def test_quickstart_runs_the_three_methods_and_compares_them(shipped: tuple[Path, str]) -> None:
    runs, out = shipped
    for name in ("grpo", "amir", "lens"):
        assert [e["step"] for e in read_heldout(runs / name)] == [0, 25, 50]
    table = table_rows(out)
    assert [row.split(" | ")[0] for row in table[2:]] == ["| GRPO", "| AMIR-GRPO", "| LENS"]
    # the same base policy, problems and sampling streams: the same accuracy before training
    before = {row.split(" | ")[1] for row in table[2:]}
    assert len(before) == 1
    cells = [row.split(" | ") for row in table[2:]]
    assert cells[0][6:] == ["0.0%", "–", "– |"]  # GRPO: no all-wrong group moves, no pairs
    assert cells[1][6] == "0.0%" and float(cells[1][7]) > 0  # AMIR-GRPO: pairs
    assert cells[1][8].startswith("0.0")  # and lambda
    assert cells[2][6] not in ("0.0%", "–") and cells[2][7] == "–"  # LENS: all-wrong groups move
    # each method's final accuracy against GRPO's, paired over the same problems and streams
    assert "| after vs GRPO [95 % CI] |" in table[0] and cells[0][4] == "–"
    assert all(INTERVAL.fullmatch(row[4]) for row in cells[1:])
    assert (runs / "quickstart.png").read_bytes()[:4] == b"\x89PNG"
    assert "GRPO: 50 steps" in out and "quickstart: " in out
    # run again: nothing is trained twice, the same table comes back
    again = quickstart(runs)
    assert table_rows(again) == table
    assert "nothing to resume" not in again


def platform() -> dict[str, str]:
    """What the float rounding of a CPU run depends on: torch's build, the vector kernels it
    dispatches to on this CPU, and its thread count."""
    return {
        "torch": torch.__version__.split("+")[0],
        "kernels": torch.backends.cpu.get_cpu_capability(),
        "threads": str(torch.get_num_threads()),
    }


@pytest.mark.slow
def test_the_readme_table_is_what_the_quickstart_prints(shipped: tuple[Path, str]) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    documented, printed = table_rows(readme), table_rows(shipped[1])
    measured_on = PLATFORM.search(readme)
    assert measured_on is not None, "README.md must name the platform of its table"
    if measured_on.groupdict() == platform():
        assert printed == documented
        return
    # Another CPU or thread count rounds floats otherwise, a sampled token flips, and every
    # figure may differ from there on: the README says so. What must hold: the same methods, and
    # each difference within the README's 95 % interval for it.
    assert [r.split(" | ")[0] for r in printed] == [r.split(" | ")[0] for r in documented]
    for ours, theirs in zip(printed[2:], documented[2:], strict=True):
        delta = float(INTERVAL.search(ours)["delta"])
        interval = INTERVAL.search(theirs)
        assert float(interval["low"]) <= delta <= float(interval["high"]), (ours, theirs)
