"""Calibration in `groupwise eval` (docs/algorithms.md §6, docs/guides/calibration.md): the
figures per benchmark and level, hand-computed on fake samples, in results.json, results.md and
the reliability diagram; none for a prompt that asks for no confidence."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from groupwise.calibration import calibration_table
from groupwise.cli import main as cli
from groupwise.data import Problem
from groupwise.evaluation import EvalConfig, evaluate
from groupwise.evaluation.calibration import asks_confidence, sample_arrays
from groupwise.records import group_by_problem, read_samples
from groupwise.rewards import Verdict
from groupwise.rollout import Rollouts, SamplingParams

N = 4
CORRECT = [0, 1, 2, 4]  # correct samples of problem i; a problem with c < N: one unanswered
PROBLEMS = [Problem(id=f"toy-{i}", question=f"q{i}", answer="7") for i in range(len(CORRECT))]


def completion(c: int, j: int, wrong: str = "60%") -> str:
    """Correct ones say 0.9, wrong ones `wrong` (0.6), the unanswered last one states no
    confidence."""
    if j < c:
        return "<answer> \\boxed{7} </answer> <confidence> 0.9 </confidence>"
    if j == N - 1:
        return "no idea"
    return f"<answer> \\boxed{{8}} </answer> <confidence>{wrong}</confidence>"


class AmirGenerator:
    def __init__(self, wrong: str = "60%") -> None:
        self.wrong = wrong

    def generate(
        self,
        prompts: Sequence[str],
        n: int,
        sampling: SamplingParams,
        prompt_seeds: Sequence[int] | None = None,
    ) -> Rollouts:
        texts = [completion(CORRECT[int(p[1:])], j, self.wrong) for p in prompts for j in range(n)]
        rows = len(texts)
        return Rollouts(
            prompt_ids=torch.ones(len(prompts), 2, dtype=torch.long),
            prompt_mask=torch.ones(len(prompts), 2, dtype=torch.long),
            completion_ids=torch.ones(rows, 3, dtype=torch.long),
            completion_mask=torch.ones(rows, 3, dtype=torch.long),
            texts=texts,
            truncated=torch.zeros(rows, dtype=torch.bool),
            group_size=n,
        )


def check(texts: list[str], golds: list[str]) -> list[Verdict]:
    return [
        Verdict("correct", "7")
        if "\\boxed{7}" in t
        else Verdict("wrong", "8")
        if "boxed" in t
        else Verdict("no_answer", None)
        for t in texts
    ]


def run(folder: Path, problems: list[Problem], prompt: str = "amir", wrong: str = "60%") -> dict:
    config = EvalConfig(
        model="fake", benchmarks=("toy",), n=N, ks=(1, 2), batch_size=N, prompt=prompt
    )
    return evaluate(
        config,
        {"toy": problems},
        AmirGenerator(wrong),
        folder,
        prompt_fn=lambda p: p.question,
        check_fn=check,
        progress=False,
    )


def test_calibration_hand_computed_in_results(tmp_path: Path) -> None:
    results = run(tmp_path, PROBLEMS)
    table = results["toy"]["calibration"]
    # 16 completions, 3 without a confidence; 7 correct at 0.9, 6 wrong at 0.6
    assert (table["completions"], table["with_confidence"], table["missing"]) == (16, 13, 3)
    assert table["coverage"] == pytest.approx(13 / 16)
    assert table["brier"] == pytest.approx((7 * 0.1**2 + 6 * 0.6**2) / 13)
    assert table["auroc"] == pytest.approx(1.0)
    assert table["overconfidence"] == pytest.approx((7 * 0.9 + 6 * 0.6 - 7) / 13)
    # the two values fall in different bins in both binnings: (6 * 0.6 + 7 * 0.1) / 13
    assert table["ece_width"] == pytest.approx(4.3 / 13)
    assert table["ece_mass"] == pytest.approx(4.3 / 13)
    assert table["accuracy"] == pytest.approx(7 / 13)
    for key in ("coverage", "brier", "ece_mass", "ece_width", "overconfidence"):
        low, high = table[f"{key}_ci"]
        assert low <= table[key] <= high
    width = table["reliability"]["uniform"]
    assert width["count"] == [0, 0, 0, 0, 0, 6, 0, 0, 7, 0]
    # the same numbers as groupwise.calibration over the saved samples
    samples = read_samples(tmp_path / "samples.jsonl")
    arrays = sample_arrays(list(group_by_problem(samples).values()))
    direct = calibration_table(arrays["confidence"], arrays["correct"], arrays["problems"])
    assert {k: table[k] for k in direct} == direct
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["toy"]["calibration"] == table
    markdown = (tmp_path / "results.md").read_text()
    assert "| toy | 81.2 [" in markdown and "never read as 0.5" in markdown
    assert (tmp_path / "calibration.png").stat().st_size > 0


def test_calibration_per_level(tmp_path: Path) -> None:
    levels = ["Level 5", 4, "Level 1", "Level 4"]
    leveled = [
        dataclasses.replace(p, meta={"level": lv}) for p, lv in zip(PROBLEMS, levels, strict=True)
    ]
    by_level = run(tmp_path, leveled)["toy"]["levels"]
    # level 1 = problem 2 (c = 2): 0.9, 0.9, 0.6 and one missing
    level1 = by_level["1"]["calibration"]
    assert level1["coverage"] == pytest.approx(3 / 4)
    assert level1["brier"] == pytest.approx((2 * 0.01 + 0.36) / 3)
    # level 5 = problem 0: three wrong at 0.6, AUROC undefined with one class
    level5 = by_level["5"]["calibration"]
    assert level5["auroc"] is None and level5["brier"] == pytest.approx(0.36)
    # Levels 4-5 = problems 0, 1, 3: 5 correct at 0.9, 5 wrong at 0.6, 2 missing
    hard = by_level["4-5"]["calibration"]
    assert (hard["with_confidence"], hard["missing"]) == (10, 2)
    assert hard["overconfidence"] == pytest.approx((5 * 0.9 + 5 * 0.6 - 5) / 10)
    assert "toy calibration by MATH difficulty level:" in (tmp_path / "results.md").read_text()


def test_no_calibration_without_a_confidence_prompt(tmp_path: Path) -> None:
    assert asks_confidence("amir") and not asks_confidence("boxed")
    results = run(tmp_path, PROBLEMS, prompt="boxed")
    assert "calibration" not in results["toy"]
    assert not (tmp_path / "calibration.png").exists()
    assert "Calibration" not in (tmp_path / "results.md").read_text()


def test_report_compares_calibration_with_paired_intervals(tmp_path: Path) -> None:
    run(tmp_path / "a", PROBLEMS)
    run(tmp_path / "b", PROBLEMS, wrong="0.3")  # the wrong answers now say 0.3, not 0.6
    page = tmp_path / "page.md"
    assert cli(["report", f"A={tmp_path / 'a'}", f"B={tmp_path / 'b'}", "--output", str(page)]) == 0
    text = page.read_text()
    assert "## Calibration" in text and "| toy | A | 81.2 [" in text
    # Brier (7 * 0.01 + 6 * 0.09) / 13 - (7 * 0.01 + 6 * 0.36) / 13 = -1.62 / 13 = -0.125; the
    # coverage and AUROC are the same in every resample: +0 with a [+0, +0] interval
    row = next(line for line in text.splitlines() if line.startswith("| toy | B - A |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "4"
    assert cells[3] == "+0.0 [+0.0, +0.0]" and cells[7] == "+0.000 [+0.000, +0.000]"
    assert cells[4].startswith(f"{-1.62 / 13:+.3f} [")
    low, high = (float(x) for x in cells[4].split("[")[1].rstrip("]").split(","))
    assert low <= -1.62 / 13 <= high < 0
