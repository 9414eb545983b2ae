"""The README's main command, scripts/quickstart.sh, end to end at a tiny size: three runs
(GRPO, AMIR-GRPO, LENS) from the shipped policy, each evaluated on held-out problems, then the
comparison table and figure; run again, it continues the finished runs and prints them again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from groupwise.train.config import load_config
from groupwise.train.heldout import read_heldout

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "train.max_steps=2",
    "train.eval_every=1",
    "train.eval_samples=2",
    "rollout.questions_per_step=4",
    "rollout.max_new_tokens=64",
    # the long level: most groups of the base policy are all wrong, so each method's handling
    # of them shows in two steps
    "data.options={level: long, size: 50, seed: 1}",
    "data.heldout={benchmark: arith, split: test, options: {level: mid, size: 8}}",
]


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


@pytest.mark.slow
def test_quickstart_runs_the_three_methods_and_compares_them(tmp_path: Path) -> None:
    env = {**os.environ, "RUNS": str(tmp_path / "qs")}

    def quickstart() -> str:
        done = subprocess.run(
            ["bash", "scripts/quickstart.sh", *TINY],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    out = quickstart()
    for name in ("grpo", "amir", "lens"):
        assert [e["step"] for e in read_heldout(tmp_path / "qs" / name)] == [0, 1, 2]
    table = out[out.index("| method |") :].splitlines()
    assert [row.split(" | ")[0] for row in table[2:5]] == ["| GRPO", "| AMIR-GRPO", "| LENS"]
    # the same base policy, problems and sampling streams: the same accuracy before training
    before = {row.split(" | ")[1] for row in table[2:5]}
    assert len(before) == 1
    cells = [row.split(" | ") for row in table[2:5]]
    assert cells[0][5:] == ["0.0%", "–", "– |"]  # GRPO: no all-wrong group moves, no pairs
    assert cells[1][5] == "0.0%" and float(cells[1][6]) > 0  # AMIR-GRPO: pairs
    assert cells[1][7].startswith("0.0")  # and lambda
    assert cells[2][5] not in ("0.0%", "–") and cells[2][6] == "–"  # LENS: all-wrong groups move
    assert (tmp_path / "qs" / "quickstart.png").read_bytes()[:4] == b"\x89PNG"
    assert "GRPO: 2 steps" in out and "quickstart: " in out
    # run again: nothing is trained twice, the same table comes back
    again = quickstart()
    assert again[again.index("| method |") :].splitlines()[:5] == table[:5]
    assert "nothing to resume" not in again
