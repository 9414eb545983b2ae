"""A weighted sum of named reward components over a batch (docs/algorithms.md §2 and §3).

`RewardSuite({"correctness": 1.0, "format": 1.0, ...}, checking="groupwise").score(completions,
golds)` checks every answer once under one checking mode (`check_answers`, in a worker pool
with hard timeouts), feeds each component the same verdicts, and returns a `Scores` with one
unweighted column per component, the weighted total and the `correct` flag.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from groupwise.errors import RewardError
from groupwise.rewards.checking import DEFAULT_MODE, Verdict, checking_mode
from groupwise.rewards.components import Component, get_component
from groupwise.rewards.pool import DEFAULT_TIMEOUT, check_answers

__all__ = [
    "AMIR_GRPO_CHECKING",
    "AMIR_GRPO_GROUPWISE_WEIGHTS",
    "AMIR_GRPO_WEIGHTS",
    "LENS_CHECKING",
    "LENS_WEIGHTS",
    "SUM_ORDER",
    "RewardSuite",
    "Scores",
    "weighted_total",
]

AMIR_GRPO_WEIGHTS: dict[str, float] = {
    "correctness": 1.0,
    "expression_official": 1.0,
    "format_official": 1.0,
    "integer_official": 1.0,
    "tag_count": 1.0,
    "calibration_official": 1.0,
}
"""The AMIR-GRPO official reward: the six functions of the official code's calibrated
`reward_funcs` summed with weight 1 (the paper names three: correctness, format, calibration);
with checking mode `AMIR_GRPO_CHECKING` it is the official code's reward (docs/algorithms.md,
"Rewards of AMIR-GRPO")."""

AMIR_GRPO_CHECKING = "amir_official"
"""The checking mode of the AMIR-GRPO official correctness (last box, else last number)."""

AMIR_GRPO_GROUPWISE_WEIGHTS: dict[str, float] = {
    "correctness": 1.0,
    "format": 1.0,
    "integer": 1.0,
    "tag_count": 1.0,
    "calibration": 1.0,
}
"""Our lenient alternative to `AMIR_GRPO_WEIGHTS` (answer read in `<answer>` unboxed, integer
reward for integer answers only, format anchored at the end, confidence "85%" read): use it
with the "groupwise" checking mode."""

LENS_WEIGHTS: dict[str, float] = {"binary": 1.0}
"""LENS: the binary correctness reward alone."""

LENS_CHECKING = "math_verify"
"""The checking mode of the LENS paper (Math-Verify as the verifier, docs/algorithms.md §3)."""


SUM_ORDER = (
    "calibration_official",
    "calibration",
    "expression_official",
    "tag_count",
    "format_official",
    "format",
    "integer_official",
    "integer",
    "correctness",
)
"""The order in which the weighted total adds its columns: the AMIR-GRPO official code's
`reward_funcs` order (brier_score, expression_correctness_reward_func, xmlcount_reward_func,
strict_format_reward_func_with_calib, int_reward_func, correctness_reward_func), each lenient
variant beside its official one, then any other component in the order of the weights."""


def weighted_total(
    columns: Mapping[str, torch.Tensor], weights: Mapping[str, float]
) -> torch.Tensor:
    """sum_k weights[k] * columns[k] as TRL's GRPOTrainer sums the official code's rewards:
    the float32 columns stacked [B, K] in `SUM_ORDER`, times the float32 weights, `nansum` over
    K. float32 addition is not associative, so the order decides the last bit: a correct and a
    wrong completion whose official totals differ by exactly the AMIR margin 2.0 keep a
    difference of 2.0 (summed in another order it can be 2.0000002 and form a pair the
    official code does not; docs/algorithms.md §2). Returns float32 [B]."""
    rank = {name: i for i, name in enumerate(SUM_ORDER)}
    order = sorted(columns, key=lambda name: rank.get(name, len(SUM_ORDER)))  # stable
    stacked = torch.stack([columns[name].to(torch.float32) for name in order], dim=1)
    scale = torch.tensor([weights[name] for name in order], dtype=torch.float32)
    return (stacked * scale.unsqueeze(0)).nansum(dim=1)


@dataclass
class Scores:
    """Rewards of a batch of B completions.

    columns: component name -> float32 Tensor[B], unweighted values.
    weights: component name -> weight. total: float32 Tensor[B] = sum_k weights[k] * columns[k],
    summed by `weighted_total` (the official code's order).
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
    per answer. checking: the checking mode that decides correctness ("groupwise", the
    default; "math_verify"; "amir_official"; "amir_eval": `groupwise.rewards.checking.MODES`);
    an unknown mode is an error naming the valid ones.
    """

    def __init__(
        self,
        weights: Mapping[str, float],
        workers: int = 2,
        timeout: float = DEFAULT_TIMEOUT,
        checking: str = DEFAULT_MODE,
    ) -> None:
        if not weights:
            raise ValueError("RewardSuite: weights is empty; name at least one component")
        self.components = {name: get_component(name) for name in weights}
        self.weights = {name: float(weight) for name, weight in weights.items()}
        self.workers = workers
        self.timeout = timeout
        self.checking = checking_mode(checking).name

    def score(self, completions: Sequence[str], golds: Sequence[str]) -> Scores:
        """Scores of `completions` (length B) against `golds` (one gold answer per completion:
        repeat a problem's gold for each of its G samples).

        A component that raises, or returns anything but a finite real number (None, a
        string, NaN, inf), is an error naming the component, the function that implements it
        (its plugin module) and the completion."""
        verdicts = check_answers(
            completions, golds, workers=self.workers, timeout=self.timeout, mode=self.checking
        )
        pairs = list(zip(completions, verdicts, strict=True))
        columns = {
            name: torch.tensor(_column(component, pairs), dtype=torch.float32)
            for name, component in self.components.items()
        }
        total = weighted_total(columns, self.weights)
        correct = torch.tensor([v.correct for v in verdicts], dtype=torch.bool)
        return Scores(columns, dict(self.weights), total, correct, verdicts)


def _column(component: Component, pairs: list[tuple[str, Verdict]]) -> list[float]:
    """The values of `component` on each (completion, verdict), checked to be finite reals."""
    where = f"{component.fn.__module__}.{component.fn.__qualname__}"
    values = []
    for index, (completion, verdict) in enumerate(pairs):
        try:
            value = component.fn(completion, verdict)
        except Exception as error:
            raise RewardError(
                f"reward component {component.name!r} ({where}) raised on completion {index} "
                f"of {len(pairs)}: {type(error).__name__}: {error}"
            ) from error
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise RewardError(
                f"reward component {component.name!r} ({where}) returned {value!r} for "
                f"completion {index} of {len(pairs)}; a component must return a finite number"
            )
        values.append(float(value))
    return values
