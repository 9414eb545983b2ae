"""Reward components (docs/algorithms.md, "Rewards of AMIR-GRPO"; §3 for the binary LENS reward).

Each component is a function `(completion: str, verdict: Verdict) -> float` of one completion's
text and its answer-check verdict, so the answer is checked once per completion and every
component reads the same verdict. Values are unweighted; `RewardSuite` applies the weights.
Whether an answer is correct is the checking mode's decision (`groupwise.rewards.checking`):
the AMIR-GRPO official correctness is the mode "amir_official" with the "correctness"
component.

Built-in components. The official ones reproduce the AMIR-GRPO official code
(`Train/rewards.py`, see `groupwise.rewards.official`); the others are ours, more lenient
alternatives:

- "correctness": 2.0 if the answer is correct, else 0 (official value).
- "binary": 1.0 if correct, else 0 (LENS).
- "format_official": 0.5 if the stripped completion matches the official
  `_STRICT_XML_WITH_CALIB_PATTERN` (`STRICT_FORMAT_OFFICIAL`): the four blocks in order with p
  a literal in [0, 1], compiled with re.MULTILINE, so the final `$` also matches at a line end
  and text may follow on later lines (`strict_format_reward_func_with_calib`).
- "format" (ours): the same four blocks, anchored at the very end (`\\Z`, `STRICT_FORMAT`):
  nothing may follow `</confidence>`.
- "integer_official": 0.2 if a number (decimals included) can be read from the first closed
  `<answer>` block (its first box's first number, else its last number); 0 without such a block
  (`int_reward_func`).
- "integer" (ours): 0.2 if the extracted answer is an integer literal ("42", "-7", "1,000" and
  "12.0" count; "3/4", "2.5", a letter do not), wherever the answer was read.
- "tag_count": +0.025 for each of the 8 tags that occurs exactly once; when `</confidence>`
  occurs exactly once, minus min(0.001 x characters after it (whitespace-stripped), 0.1).
  Range [-0.075, 0.2] (official `xmlcount_reward_func`).
- "calibration_official": 1 - (p - a)^2 with a = 1 if correct else 0 and p the first
  `<confidence>` block holding a bare number, clipped to [0, 1], else 0.5 (`brier_score`,
  `extract_confidence`).
- "calibration" (ours): the same with p = `parse_confidence` ("85%", "0.8 (sure)" read too).
- "expression_official": +0.1 for each correct arithmetic claim "a OP b = c" in the completion
  (`expression_correctness_reward_func`; `groupwise.rewards.official.official_expression_reward`).
  Unbounded above: its bounds are (0, inf), so no margin is refused for being out of reach.

Register more with `@register_component("name")`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from groupwise.rewards.checking import Verdict
from groupwise.rewards.official import (
    official_answer_block,
    official_confidence,
    official_expression_reward,
    official_numeric_answer,
)

__all__ = [
    "COMPONENTS",
    "STRICT_FORMAT",
    "STRICT_FORMAT_OFFICIAL",
    "Component",
    "ComponentFn",
    "component_names",
    "correct_value",
    "get_component",
    "matches_strict_format",
    "parse_confidence",
    "register_component",
]

ComponentFn = Callable[[str, Verdict], float]


@dataclass(frozen=True)
class Component:
    """A named reward component. correct_value: for a correctness-type component, its value on
    a correct answer (LENS rescales it, docs/algorithms.md §3); None for the others. bounds:
    (lowest, highest) value it can return, or None when unknown; AMIR-GRPO refuses a margin above
    the reward's whole range (groupwise.algorithms.largest_reward_gap)."""

    name: str
    fn: ComponentFn
    correct_value: float | None = None
    bounds: tuple[float, float] | None = None


COMPONENTS: dict[str, Component] = {}


def register_component(
    name: str,
    *,
    correct_value: float | None = None,
    bounds: tuple[float, float] | None = None,
    replace: bool = False,
) -> Callable[[ComponentFn], ComponentFn]:
    """Decorator adding `fn(completion, verdict) -> float` to the registry as `name`.

    correct_value, bounds: see `Component`; a correctness component's bounds default to
    (0, correct_value). A second registration of a name is an error unless replace=True.
    """
    if bounds is None and correct_value is not None:
        bounds = (0.0, correct_value)

    def decorator(fn: ComponentFn) -> ComponentFn:
        if name in COMPONENTS and not replace:
            raise ValueError(f"reward component {name!r} is already registered")
        COMPONENTS[name] = Component(name, fn, correct_value, bounds)
        return fn

    return decorator


def component_names() -> list[str]:
    """Registered component names, sorted."""
    return sorted(COMPONENTS)


def get_component(name: str) -> Component:
    """The registered component `name`; unknown names raise naming the valid ones."""
    if name not in COMPONENTS:
        raise ValueError(
            f"unknown reward component {name!r}; valid components: {component_names()}"
        )
    return COMPONENTS[name]


def correct_value(name: str) -> float:
    """The value component `name` gives a correct answer (2.0 for "correctness", 1.0 for
    "binary"); an error for a component that is not a correctness reward."""
    value = get_component(name).correct_value
    if value is None:
        valid = sorted(c.name for c in COMPONENTS.values() if c.correct_value is not None)
        raise ValueError(
            f"reward component {name!r} is not a correctness reward; correctness components: "
            f"{valid}"
        )
    return value


STRICT_FORMAT = re.compile(
    r"<think>\s*[\s\S]*?\s*</think>\s*"
    r"<answer>\s*[\s\S]*?\s*</answer>\s*"
    r"<analysis>\s*[\s\S]*?\s*</analysis>\s*"
    r"<confidence>\s*(?:0(?:\.\d+)?|1(?:\.0+)?)\s*</confidence>\Z"
)
"""The strict AMIR-GRPO format as a regex, for `.match` on the stripped completion, anchored at
the very end (ours). Its lazy blocks backtrack polynomially on a near-miss, so
`matches_strict_format` decides the same language with linear searches instead (tests check
both agree)."""

STRICT_FORMAT_OFFICIAL = re.compile(
    r"^<think>\s*[\s\S]*?\s*</think>\s*"
    r"<answer>\s*[\s\S]*?\s*</answer>\s*"
    r"<analysis>\s*[\s\S]*?\s*</analysis>\s*"
    r"<confidence>\s*(?:0(?:\.\d+)?|1(?:\.0+)?)\s*</confidence>\s*$",
    re.DOTALL | re.MULTILINE,
)
"""The official `_STRICT_XML_WITH_CALIB_PATTERN` (AMIR-GRPO `Train/rewards.py`), for `.match` on
the stripped completion: `$` with re.MULTILINE matches at any line end, so text may follow
`</confidence>` from the next line on. `matches_strict_format(..., line_anchored=True)`
decides it in linear time."""

_THINK_TO_ANSWER = re.compile(r"</think>\s*<answer>")
_ANSWER_TO_ANALYSIS = re.compile(r"</answer>\s*<analysis>")
_FORMAT_TAIL = re.compile(
    r"</analysis>\s*<confidence>\s*(?:0(?:\.\d+)?|1(?:\.0+)?)\s*</confidence>\Z"
)
# The official tail: `\s*$` under re.MULTILINE holds when the blank run after `</confidence>`
# reaches a line end or the end of the text.
_FORMAT_TAIL_LINE = re.compile(
    r"</analysis>\s*<confidence>\s*(?:0(?:\.\d+)?|1(?:\.0+)?)\s*</confidence>[^\S\n]*(?:\n|\Z)"
)
_TAGS = (
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<analysis>",
    "</analysis>",
    "<confidence>",
    "</confidence>",
)
_CONFIDENCE_VALUE = re.compile(r"([-+]?\d*\.?\d+)\s*(%)?")
_INTEGER_ANSWER = re.compile(r"^[-+]?\d+(?:\.0+)?$")


def parse_confidence(completion: str) -> float | None:
    """The verbalized confidence p in [0, 1] of the first `<confidence>` block, or None.

    The first number in the block is read ("0.8", " .8 ", "0.8 (fairly sure)"); "85%" is 0.85;
    values outside [0, 1] are clipped (as the official code, which reads only a bare number:
    "0.8 (fairly sure)" and "85%" give it its default 0.5).
    """
    opening = completion.find("<confidence>")
    closing = completion.find("</confidence>", opening) if opening >= 0 else -1
    if closing < 0:
        return None
    value = _CONFIDENCE_VALUE.search(completion, opening + len("<confidence>"), closing)
    if value is None:
        return None
    p = float(value.group(1)) / (100.0 if value.group(2) else 1.0)
    return min(1.0, max(0.0, p))


def matches_strict_format(completion: str, *, line_anchored: bool = False) -> bool:
    """Whether the stripped completion matches `STRICT_FORMAT` (or, line_anchored=True,
    `STRICT_FORMAT_OFFICIAL`), in linear time.

    The lazy blocks of the regex accept anything, so the completion matches iff it starts
    with `<think>`, has a `</think>\\s*<answer>` after that, a `</answer>\\s*<analysis>` after
    the first such, and then `</analysis>\\s*<confidence> p </confidence>` (the leftmost choice
    of each junction leaves the most room for the rest): at the very end, so holding the last
    `</analysis>`; or, line-anchored, anywhere after, followed by blanks up to a line end.
    """
    text = completion.strip()
    if not text.startswith("<think>"):
        return False
    think_end = _THINK_TO_ANSWER.search(text, len("<think>"))
    if think_end is None:
        return False
    answer_end = _ANSWER_TO_ANALYSIS.search(text, think_end.end())
    if answer_end is None:
        return False
    if line_anchored:
        return _FORMAT_TAIL_LINE.search(text, answer_end.end()) is not None
    tail = text.rfind("</analysis>")
    return tail >= answer_end.end() and _FORMAT_TAIL.match(text, tail) is not None


@register_component("correctness", correct_value=2.0)
def correctness(completion: str, verdict: Verdict) -> float:
    """2.0 for a correct final answer, else 0."""
    return 2.0 if verdict.correct else 0.0


@register_component("binary", correct_value=1.0)
def binary(completion: str, verdict: Verdict) -> float:
    """1.0 for a correct final answer, else 0 (LENS, docs/algorithms.md §3)."""
    return 1.0 if verdict.correct else 0.0


@register_component("format", bounds=(0.0, 0.5))
def strict_format(completion: str, verdict: Verdict) -> float:
    """0.5 when the whole completion is the four AMIR-GRPO blocks in order, else 0 (ours)."""
    return 0.5 if matches_strict_format(completion) else 0.0


@register_component("format_official", bounds=(0.0, 0.5))
def strict_format_official(completion: str, verdict: Verdict) -> float:
    """0.5 when the completion matches the official line-anchored format regex, else 0
    (`strict_format_reward_func_with_calib`)."""
    return 0.5 if matches_strict_format(completion, line_anchored=True) else 0.0


@register_component("integer", bounds=(0.0, 0.2))
def integer_answer(completion: str, verdict: Verdict) -> float:
    """0.2 when the extracted answer is an integer literal, else 0 (ours)."""
    extracted = verdict.extracted
    return 0.2 if extracted is not None and _INTEGER_ANSWER.match(extracted.strip()) else 0.0


@register_component("integer_official", bounds=(0.0, 0.2))
def integer_answer_official(completion: str, verdict: Verdict) -> float:
    """0.2 when a number can be read from the first closed `<answer>` block, else 0
    (`int_reward_func`: `extract_numeric_answer(extract_xml_answer(completion))`)."""
    block = official_answer_block(completion)
    return 0.2 if block is not None and official_numeric_answer(block) is not None else 0.0


@register_component("tag_count", bounds=(-0.075, 0.2))
def tag_count(completion: str, verdict: Verdict) -> float:
    """0.025 per tag present exactly once, minus the trailing-text penalty (max 0.2)."""
    # A product, not a running sum: 8 x 0.025 is exactly the float 0.2.
    score = 0.025 * sum(completion.count(tag) == 1 for tag in _TAGS)
    if completion.count("</confidence>") == 1:
        trailing = completion.split("</confidence>")[-1].strip()
        score -= min(0.001 * len(trailing), 0.1)
    return score


@register_component("calibration", bounds=(0.0, 1.0))
def calibration(completion: str, verdict: Verdict) -> float:
    """Brier complement 1 - (p - a)^2 of the stated confidence p (0.5 if missing; ours)."""
    p = parse_confidence(completion)
    return _brier(0.5 if p is None else p, verdict)


@register_component("calibration_official", bounds=(0.0, 1.0))
def calibration_official(completion: str, verdict: Verdict) -> float:
    """Brier complement 1 - (p - a)^2 with p the official reading of the confidence
    (`brier_score` with `extract_confidence`; 0.5 if missing or not a bare number)."""
    return _brier(official_confidence(completion), verdict)


@register_component("expression_official", bounds=(0.0, math.inf))
def expression_official(completion: str, verdict: Verdict) -> float:
    """0.1 per correct "a OP b = c" claim (official `expression_correctness_reward_func`)."""
    return official_expression_reward(completion)


def _brier(p: float, verdict: Verdict) -> float:
    a = 1.0 if verdict.correct else 0.0
    return 1.0 - (p - a) ** 2
