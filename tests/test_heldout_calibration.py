"""Unbiased pass@k and calibration in groupwise's own trainer's held-out evaluation
(groupwise.train.heldout; docs/algorithms.md §4 and §6), by hand on fake samples."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from groupwise.data import Problem
from groupwise.metrics import doubling_ks, pass_at_k
from groupwise.rollout import SamplingParams
from groupwise.train.heldout import HeldoutEvaluation, read_heldout
from groupwise.train.metrics_log import JsonlLog

N = 4
CORRECT = [0, 1, 2, 4]
PROBLEMS = [Problem(id=f"h{i}", question=f"q{i}", answer="7") for i in range(len(CORRECT))]


def text(c: int, j: int) -> str:
    if j < c:
        return "<answer> \\boxed{7} </answer> <confidence> 0.9 </confidence>"
    if j == N - 1:
        return "no confidence"
    return "<answer> \\boxed{8} </answer> <confidence> 0.6 </confidence>"


class Generator:
    def generate(
        self, prompts: Sequence[str], n: int, sampling: Any, prompt_seeds: Any = None
    ) -> Any:
        return SimpleNamespace(
            texts=[text(CORRECT[int(p[1:])], j) for p in prompts for j in range(n)]
        )


class Rewards:
    def score(self, texts: Sequence[str], golds: Sequence[str]) -> Any:
        return SimpleNamespace(correct=torch.tensor(["boxed{7}" in t for t in texts]))


class One:
    rank, world_size, is_main = 0, 1, True

    def gather(self, obj: Any) -> list[Any]:
        return [obj]


def evaluation(folder: Path, asks_confidence: bool) -> HeldoutEvaluation:
    return HeldoutEvaluation(
        PROBLEMS,
        [p.question for p in PROBLEMS],
        Generator(),  # type: ignore[arg-type]
        Rewards(),  # type: ignore[arg-type]
        N,
        SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=8),
        0,
        2,
        4,
        One(),  # type: ignore[arg-type]
        JsonlLog(folder / "heldout.jsonl", None),
        asks_confidence=asks_confidence,
    )


def test_doubling_ks() -> None:
    assert doubling_ks(1) == [1] and doubling_ks(4) == [1, 2, 4] and doubling_ks(6) == [1, 2, 4, 6]


def test_heldout_pass_at_k_and_calibration_by_hand(tmp_path: Path) -> None:
    metrics = evaluation(tmp_path, asks_confidence=True).evaluate(2)
    assert metrics["heldout_accuracy"] == pytest.approx(7 / 16) == metrics["heldout_pass@1"]
    for k in (2, 4):
        expected = sum(pass_at_k(N, c, k) for c in CORRECT) / 4
        assert metrics[f"heldout_pass@{k}"] == pytest.approx(expected)
    # 7 correct at 0.9, 6 wrong at 0.6, 3 without a confidence (counted, not read as 0.5)
    assert metrics["heldout_confidence_coverage"] == pytest.approx(13 / 16)
    assert metrics["heldout_brier"] == pytest.approx((7 * 0.01 + 6 * 0.36) / 13)
    assert metrics["heldout_auroc"] == pytest.approx(1.0)
    assert metrics["heldout_ece_width"] == pytest.approx(4.3 / 13)
    assert metrics["heldout_overconfidence"] == pytest.approx((7 * 0.9 + 6 * 0.6 - 7) / 13)
    [line] = read_heldout(tmp_path)
    assert line["correct"] == CORRECT and line["step"] == 2
    low, high = line["pass_at_k"]["pass@2_ci"]
    assert low <= metrics["heldout_pass@2"] <= high
    assert line["calibration"]["missing"] == 3
    assert line["calibration"]["brier"] == metrics["heldout_brier"]


def test_no_calibration_when_the_prompt_asks_for_none(tmp_path: Path) -> None:
    metrics = evaluation(tmp_path, asks_confidence=False).evaluate(0)
    assert "heldout_brier" not in metrics and "heldout_pass@4" in metrics
    assert "calibration" not in read_heldout(tmp_path)[0]
