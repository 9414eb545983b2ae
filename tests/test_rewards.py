"""Reward components and RewardSuite (REFERENCE.md 2 and 3) on hand-written completions."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import groupwise.rewards.suite as suite_module
from groupwise.rewards import (
    AMIR_GRPO_WEIGHTS,
    COMPONENTS,
    LENS_WEIGHTS,
    RewardSuite,
    Verdict,
    component_names,
    correct_value,
    parse_confidence,
    register_component,
)
from groupwise.rewards.components import (
    STRICT_FORMAT,
    calibration,
    integer_answer,
    matches_strict_format,
    strict_format,
    tag_count,
)

FULL = (
    "<think> 16 - 3 - 4 = 9 eggs, 9 * 2 = 18 dollars </think>\n"
    "<answer> \\boxed{18} </answer>\n"
    "<analysis> simple arithmetic, checked twice </analysis>\n"
    "<confidence> 0.9 </confidence>"
)
NO_CONFIDENCE = "<think> 9 * 2 = 18 </think> <answer> \\boxed{18} </answer>"

RIGHT = Verdict("correct", "18", "identical")
WRONG = Verdict("wrong", "18", "numeric")


def test_full_amir_completion_scores_every_component() -> None:
    scores = RewardSuite(AMIR_GRPO_WEIGHTS).score([FULL, FULL], ["18", "17"])
    columns = {name: column.tolist() for name, column in scores.columns.items()}
    assert columns["correctness"] == [2.0, 0.0]
    assert columns["format"] == [0.5, 0.5]
    assert columns["integer"] == pytest.approx([0.2, 0.2])  # 18 is an integer either way
    assert columns["tag_count"] == pytest.approx([0.2, 0.2])  # 8 tags x 0.025, no trailing text
    # calibration: p = 0.9; right: 1 - (0.9 - 1)^2 = 0.99; wrong: 1 - (0.9 - 0)^2 = 0.19
    assert columns["calibration"] == pytest.approx([0.99, 0.19])
    # totals (all weights 1): 2.0 + 0.5 + 0.2 + 0.2 + 0.99 = 3.89; 0 + 0.5 + 0.2 + 0.2 + 0.19 = 1.09
    assert scores.total.tolist() == pytest.approx([3.89, 1.09])
    assert scores.correct.tolist() == [True, False]
    assert [v.status for v in scores.verdicts] == ["correct", "wrong"]
    assert scores.total.dtype == torch.float32 and scores.correct.dtype == torch.bool
    assert scores.weights == AMIR_GRPO_WEIGHTS


def test_trailing_text_breaks_format_and_costs_tag_count() -> None:
    trailing = FULL + "\n extra text  "  # "extra text": 10 characters once stripped
    assert strict_format(trailing, RIGHT) == 0.0
    assert tag_count(trailing, RIGHT) == pytest.approx(0.2 - 0.001 * 10)  # 0.19
    long_tail = FULL + "x" * 500  # penalty min(0.5, 0.1) = 0.1
    assert tag_count(long_tail, RIGHT) == pytest.approx(0.2 - 0.1)


def test_tag_count_counts_tags_present_exactly_once() -> None:
    assert tag_count(NO_CONFIDENCE, RIGHT) == pytest.approx(4 * 0.025)  # 0.1
    twice = "<think> a </think> <think> b </think>" + FULL.split("</think>", 1)[1]
    assert tag_count(twice, RIGHT) == pytest.approx(6 * 0.025)  # think tags now twice: 0.15
    # Only a closing </confidence> with 200 characters after it: 0.025 - 0.1 = -0.075
    assert tag_count("</confidence>" + "y" * 200, RIGHT) == pytest.approx(-0.075)
    assert tag_count("", RIGHT) == 0.0


def test_calibration_defaults_and_clipping() -> None:
    # Missing confidence: p = 0.5, so 1 - 0.5^2 = 0.75 whether right or wrong.
    assert calibration(NO_CONFIDENCE, RIGHT) == 0.75
    assert calibration(NO_CONFIDENCE, WRONG) == 0.75
    assert calibration("<confidence> 1 </confidence>", RIGHT) == 1.0  # 1 - (1 - 1)^2
    assert calibration("<confidence> 1 </confidence>", WRONG) == 0.0  # 1 - (1 - 0)^2
    assert calibration("<confidence>0.2</confidence>", WRONG) == pytest.approx(0.96)  # 1 - 0.04


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<confidence> 0.9 </confidence>", 0.9),
        ("<confidence>.8</confidence>", 0.8),
        ("<confidence> 85% </confidence>", 0.85),
        ("<confidence> 0.7 (fairly sure) </confidence>", 0.7),
        ("<confidence> 1.5 </confidence>", 1.0),  # clipped
        ("<confidence> -0.2 </confidence>", 0.0),  # clipped
        ("<confidence> high </confidence>", None),
        ("<confidence> 0.9", None),  # never closed
        ("no block", None),
        (
            "<confidence>0.3</confidence> <confidence>0.6</confidence>",
            0.3,
        ),  # the first, as official
    ],
)
def test_parse_confidence(text: str, expected: float | None) -> None:
    assert parse_confidence(text) == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("extracted", "expected"),
    [
        ("18", 0.2),
        ("-7", 0.2),
        ("12.0", 0.2),
        ("1000", 0.2),
        ("3/4", 0.0),
        ("2.5", 0.0),
        ("C", 0.0),
        ("x = 3", 0.0),
        (None, 0.0),
    ],
)
def test_integer_answer(extracted: str | None, expected: float) -> None:
    assert integer_answer("", Verdict("wrong", extracted, "")) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (FULL, 0.5),
        ("  \n" + FULL + "\n\n", 0.5),  # surrounding whitespace is stripped first
        (FULL.replace("0.9", "1.0"), 0.5),
        (FULL.replace("0.9", "1.5"), 0.0),  # p must be in [0, 1]
        (FULL.replace("0.9", ".9"), 0.0),  # the official literal needs the leading 0
        (FULL.replace("<analysis>", "<analyse>"), 0.0),
        (NO_CONFIDENCE, 0.0),
        ("Sure! " + FULL, 0.0),
        (FULL + "\nThanks", 0.0),  # the official MULTILINE `$` would accept this one
    ],
)
def test_strict_format(text: str, expected: float) -> None:
    assert strict_format(text, RIGHT) == expected


_PIECES = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<analysis>",
    "</analysis>",
    "<confidence>",
    "</confidence>",
    " ",
    "\n",
    "0.5",
    "1",
    "x",
    "1.5",
    "0",
]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), max_size=18),
    st.lists(st.sampled_from(_PIECES), max_size=4),
    st.booleans(),
)
def test_strict_format_search_agrees_with_the_regex(
    pieces: list[str], noise: list[str], from_valid: bool
) -> None:
    # Random tag soups, and valid completions with random insertions, are judged the same by
    # the linear-time search and by the official-style regex.
    if from_valid:
        text = FULL
        for i, piece in enumerate(noise):
            cut = (len(text) * (i + 1)) // (len(noise) + 1)
            text = text[:cut] + piece + text[cut:]
    else:
        text = "".join(pieces)
    assert matches_strict_format(text) == bool(STRICT_FORMAT.match(text.strip()))


def test_binary_and_correctness_values() -> None:
    scores = RewardSuite({"correctness": 0.5, "binary": 2.0}).score(
        ["\\boxed{7}", "\\boxed{8}"], ["7", "7"]
    )
    assert scores.columns["binary"].tolist() == [1.0, 0.0]
    assert scores.columns["correctness"].tolist() == [2.0, 0.0]
    assert scores.total.tolist() == [0.5 * 2.0 + 2.0 * 1.0, 0.0]  # weights apply to the total
    assert LENS_WEIGHTS == {"binary": 1.0}
    assert correct_value("correctness") == 2.0
    assert correct_value("binary") == 1.0
    with pytest.raises(ValueError, match=r"not a correctness reward.*\['binary', 'correctness'\]"):
        correct_value("format")


def test_unknown_or_empty_weights_rejected() -> None:
    with pytest.raises(ValueError, match=r"unknown reward component 'corectness'.*'calibration'"):
        RewardSuite({"corectness": 1.0})
    with pytest.raises(ValueError, match="weights is empty"):
        RewardSuite({})


def test_answers_checked_once_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_check(completions, golds, workers, timeout):  # type: ignore[no-untyped-def]
        calls.append(len(completions))
        return [RIGHT] * len(completions)

    monkeypatch.setattr(suite_module, "check_answers", fake_check)
    scores = RewardSuite(AMIR_GRPO_WEIGHTS).score([FULL] * 3, ["18"] * 3)
    assert calls == [3]  # one check for all five components
    assert scores.correct.all()


def test_registering_a_component() -> None:
    @register_component("short_answer_bonus")
    def short_answer_bonus(completion: str, verdict: Verdict) -> float:
        return 0.1 if len(completion) < 20 else 0.0

    try:
        assert "short_answer_bonus" in component_names()
        scores = RewardSuite({"binary": 1.0, "short_answer_bonus": 3.0}).score(
            ["\\boxed{4}", "\\boxed{5} " + "words " * 10], ["4", "4"]
        )
        assert scores.columns["short_answer_bonus"].tolist() == pytest.approx([0.1, 0.0])
        assert scores.total.tolist() == pytest.approx([1.0 + 3.0 * 0.1, 0.0])
        with pytest.raises(ValueError, match="already registered"):
            register_component("short_answer_bonus")(short_answer_bonus)
    finally:
        COMPONENTS.pop("short_answer_bonus")


def test_suite_length_mismatch() -> None:
    with pytest.raises(ValueError, match="2 completions but 1 gold"):
        RewardSuite(LENS_WEIGHTS).score(["a", "b"], ["1"])


def test_rewards_package_imports_without_torch() -> None:
    # The answer-checking workers import groupwise.rewards; torch is loaded only by RewardSuite.
    code = "import sys, groupwise.rewards; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
