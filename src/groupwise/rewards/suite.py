"""A weighted sum of named reward components over a batch (REFERENCE.md 2 and 3).

`RewardSuite({"correctness": 1.0, "format": 1.0, ...}).score(completions, golds)` checks every
answer once (`check_answers`, in a worker pool with hard timeouts), feeds each component the
same verdicts, and returns a `Scores` with one unweighted column per component, the weighted
total and the `correct` flag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from groupwise.rewards.checking import DEFAULT_TIMEOUT, Verdict, check_answers
from groupwise.rewards.components import get_component

__all__ = ["AMIR_GRPO_WEIGHTS", "LENS_WEIGHTS", "RewardSuite", "Scores"]

AMIR_GRPO_WEIGHTS: dict[str, float] = {
    "correctness": 1.0,
    "format": 1.0,
    "integer": 1.0,
    "tag_count": 1.0,
    "calibration": 1.0,
}
"""The AMIR-GRPO official code: the five components summed with weight 1."""

LENS_WEIGHTS: dict[str, float] = {"binary": 1.0}
"""LENS: the binary correctness reward alone."""


@dataclass
class Scores:
    """Rewards of a batch of B completions.

    columns: component name -> float32 Tensor[B], unweighted values.
    weights: component name -> weight. total: float32 Tensor[B] = sum_k weights[k] * columns[k].
    correct: bool Tensor[B] (verdict status "correct"). verdicts: the B answer-check verdicts.
    """

    columns: dict[str, torch.Tensor]
    weights: dict[str, float]
    total: torch.Tensor
    correct: torch.Tensor
    verdicts: list[Verdict]


class RewardSuite:
    """Named, weighted reward components (see `groupwise.rewards.components`).

    weights: component name -> weight (a mapping from config); an unknown name is an error
    naming the registered ones. workers / timeout: the answer-checking pool size and seconds
    per answer.
    """

    def __init__(
        self,
        weights: Mapping[str, float],
        workers: int = 2,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if not weights:
            raise ValueError("RewardSuite: weights is empty; name at least one component")
        self.components = {name: get_component(name) for name in weights}
        self.weights = {name: float(weight) for name, weight in weights.items()}
        self.workers = workers
        self.timeout = timeout

    def score(self, completions: Sequence[str], golds: Sequence[str]) -> Scores:
        """Scores of `completions` (length B) against `golds` (one gold answer per completion:
        repeat a problem's gold for each of its G samples)."""
        verdicts = check_answers(completions, golds, workers=self.workers, timeout=self.timeout)
        pairs = list(zip(completions, verdicts, strict=True))
        columns = {
            name: torch.tensor([component.fn(t, v) for t, v in pairs], dtype=torch.float32)
            for name, component in self.components.items()
        }
        total = torch.zeros(len(completions), dtype=torch.float32)
        for name, column in columns.items():
            total = total + self.weights[name] * column
        correct = torch.tensor([v.correct for v in verdicts], dtype=torch.bool)
        return Scores(columns, dict(self.weights), total, correct, verdicts)
