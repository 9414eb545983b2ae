"""Rewards: answer extraction, answer checking under hard timeouts, reward components and the
weighted `RewardSuite` (docs/algorithms.md §2 and §3).

`RewardSuite`, `Scores` and the weight presets need torch and are imported on first access,
so that the answer-checking worker processes (which import this package) start without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from groupwise.rewards.checking import (
    DEFAULT_MODE,
    MODES,
    CheckingMode,
    Verdict,
    answers_equivalent,
    checking_mode,
    judge,
)
from groupwise.rewards.components import (
    COMPONENTS,
    Component,
    component_names,
    correct_value,
    get_component,
    parse_confidence,
    register_component,
)
from groupwise.rewards.extract import extract_answer, extract_choice
from groupwise.rewards.pool import (
    STATUSES,
    AnswerChecker,
    check_answers,
    is_correct,
    summarize,
)

if TYPE_CHECKING:
    from groupwise.rewards.suite import (
        AMIR_GRPO_CHECKING,
        AMIR_GRPO_GROUPWISE_WEIGHTS,
        AMIR_GRPO_WEIGHTS,
        LENS_CHECKING,
        LENS_WEIGHTS,
        RewardSuite,
        Scores,
    )

_LAZY = {
    "RewardSuite",
    "Scores",
    "AMIR_GRPO_CHECKING",
    "AMIR_GRPO_GROUPWISE_WEIGHTS",
    "AMIR_GRPO_WEIGHTS",
    "LENS_CHECKING",
    "LENS_WEIGHTS",
}

__all__ = [
    "AMIR_GRPO_CHECKING",
    "AMIR_GRPO_GROUPWISE_WEIGHTS",
    "AMIR_GRPO_WEIGHTS",
    "COMPONENTS",
    "DEFAULT_MODE",
    "LENS_CHECKING",
    "LENS_WEIGHTS",
    "MODES",
    "STATUSES",
    "AnswerChecker",
    "CheckingMode",
    "Component",
    "RewardSuite",
    "Scores",
    "Verdict",
    "answers_equivalent",
    "check_answers",
    "checking_mode",
    "component_names",
    "correct_value",
    "extract_answer",
    "extract_choice",
    "get_component",
    "is_correct",
    "judge",
    "parse_confidence",
    "register_component",
    "summarize",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module("groupwise.rewards.suite"), name)
    raise AttributeError(f"module 'groupwise.rewards' has no attribute {name!r}")
