"""groupwise's reward components as TRL reward functions (docs/algorithms.md §2 and §3).

TRL calls each reward function with the batch's completions and the dataset's other columns as
keyword lists. `reward_functions({"correctness": 1.0, "format": 1.0, ...}, checking=...)` returns
one function
per component, named after it (TRL logs `rewards/<name>/mean`; GroupwiseGRPOConfig's
`correctness_reward` names one), and the weights in the same order for GRPOConfig's
`reward_weights`. The answers of a batch are checked once, under one checking mode, in
groupwise's worker pool with hard timeouts, and the verdicts shared by every component, as
groupwise's RewardSuite does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from groupwise.rewards import DEFAULT_MODE, Verdict, check_answers, checking_mode, get_component

RewardFunction = Callable[..., list[float]]


def _text(completion: Any) -> str:
    """A completion as TRL passes it: a string, or a conversation whose last message is the
    model's."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"]


def reward_functions(
    weights: Mapping[str, float],
    *,
    answer_column: str = "answer",
    workers: int = 2,
    timeout: float = 5.0,
    checking: str = DEFAULT_MODE,
) -> tuple[list[RewardFunction], list[float]]:
    """TRL reward functions for groupwise reward components, and their weights.

    Args:
        weights: component name -> weight (groupwise.rewards: e.g. AMIR_GRPO_WEIGHTS,
            LENS_WEIGHTS); an unknown name is an error naming the registered ones.
        answer_column: the dataset column holding each problem's gold answer.
        workers, timeout: answer-checking processes and seconds per answer.
        checking: the checking mode that decides correctness (`groupwise.rewards.MODES`:
            "groupwise", "math_verify", "amir_official", "amir_eval"); pair the weights with
            their paper's mode (AMIR_GRPO_CHECKING, LENS_CHECKING). An unknown mode is an
            error naming the valid ones.

    Returns:
        (functions, weights): pass them as GRPOTrainer's `reward_funcs` and GRPOConfig's
        `reward_weights`. Each function carries its component's `bounds` (min, max) or None and
        its `correct_value` (None for a component that is not a correctness reward).
    """
    components = [get_component(name) for name in weights]
    check = _BatchVerdicts(answer_column, workers, timeout, checking_mode(checking).name)
    return [_reward_function(c, check) for c in components], [
        float(weights[c.name]) for c in components
    ]


class _BatchVerdicts:
    """The verdicts of one batch, checked once: TRL calls the reward functions one after
    another on the same completions, and every component reads the same verdicts."""

    def __init__(self, answer_column: str, workers: int, timeout: float, mode: str) -> None:
        self.answer_column, self.workers, self.timeout, self.mode = (
            answer_column,
            workers,
            timeout,
            mode,
        )
        self.key: tuple | None = None
        self.verdicts: list[Verdict] = []

    def __call__(
        self, completions: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[list[str], list[Verdict]]:
        if self.answer_column not in kwargs:
            raise KeyError(
                f"the dataset has no column '{self.answer_column}' with the gold answers "
                f"(columns passed to reward functions: {sorted(kwargs)})"
            )
        texts = [_text(c) for c in completions]
        golds = [str(g) for g in kwargs[self.answer_column]]
        key = (tuple(texts), tuple(golds))
        if self.key != key:
            self.key = key
            self.verdicts = check_answers(
                texts, golds, workers=self.workers, timeout=self.timeout, mode=self.mode
            )
        return texts, self.verdicts


def _reward_function(component: Any, check: _BatchVerdicts) -> RewardFunction:
    """A TRL reward function named after `component`, with its range and correct value."""

    def reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        texts, checked = check(completions, kwargs)
        return [
            float(component.fn(text, verdict)) for text, verdict in zip(texts, checked, strict=True)
        ]

    reward.__name__ = component.name
    reward.__qualname__ = component.name
    # what GroupwiseGRPOTrainer checks when it is built: an AMIR margin above the reward's
    # range, a LENS correctness reward that is not one
    reward.bounds = component.bounds
    reward.correct_value = component.correct_value
    return reward
