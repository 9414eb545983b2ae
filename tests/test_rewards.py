"""Reward components and RewardSuite (docs/algorithms.md §2 and §3) on hand-written completions."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import groupwise.rewards.suite as suite_module
from groupwise.errors import RewardError
from groupwise.rewards import (
    AMIR_GRPO_CHECKING,
    AMIR_GRPO_GROUPWISE_WEIGHTS,
    AMIR_GRPO_WEIGHTS,
    COMPONENTS,
    LENS_CHECKING,
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
    STRICT_FORMAT_OFFICIAL,
    calibration,
    calibration_official,
    expression_official,
    integer_answer,
    integer_answer_official,
    matches_strict_format,
    strict_format,
    strict_format_official,
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
    scores = RewardSuite(AMIR_GRPO_GROUPWISE_WEIGHTS).score([FULL, FULL], ["18", "17"])
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
    assert scores.weights == AMIR_GRPO_GROUPWISE_WEIGHTS


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
    st.lists(st.sampled_from([*_PIECES, "\n x", " y"]), max_size=18),
    st.lists(st.sampled_from([*_PIECES, "\n x", " y"]), max_size=4),
    st.booleans(),
    st.booleans(),
)
def test_strict_format_search_agrees_with_the_regex(
    pieces: list[str], noise: list[str], from_valid: bool, line_anchored: bool
) -> None:
    # Random tag soups, and valid completions with random insertions, are judged the same by
    # the linear-time search and by the regex (ours anchored at the end, or the official one
    # anchored at a line end).
    if from_valid:
        text = FULL
        for i, piece in enumerate(noise):
            cut = (len(text) * (i + 1)) // (len(noise) + 1)
            text = text[:cut] + piece + text[cut:]
    else:
        text = "".join(pieces)
    regex = STRICT_FORMAT_OFFICIAL if line_anchored else STRICT_FORMAT
    expected = bool(regex.match(text.strip()))
    assert matches_strict_format(text, line_anchored=line_anchored) == expected


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

    def fake_check(completions, golds, workers, timeout, mode):  # type: ignore[no-untyped-def]
        calls.append((len(completions), mode))
        return [RIGHT] * len(completions)

    monkeypatch.setattr(suite_module, "check_answers", fake_check)
    scores = RewardSuite(AMIR_GRPO_WEIGHTS, checking="amir_official").score([FULL] * 3, ["18"] * 3)
    assert calls == [(3, "amir_official")]  # one check for all five components, in its mode
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


# ---------------------------------------------------------------------------------------------
# The AMIR-GRPO official reward (docs/algorithms.md §2; AMIR-GRPO Train/rewards.py), hand-computed
# on completions in the format its system prompt asks for.

UNBOXED = FULL.replace("\\boxed{18}", "18")
NO_CONFIDENCE_UNBOXED = "<think> 9 * 2 = 18 </think> <answer> 18 </answer>"
DECIMAL = (
    "<think> 5 / 2 </think> <answer> \\boxed{2.5} </answer> "
    "<analysis> one division </analysis> <confidence> 0.7 </confidence>"
)
FRACTION = (
    "<think> 1 / 2 </think> <answer> \\boxed{\\frac{1}{2}} </answer> "
    "<analysis> a half </analysis> <confidence> 0.8 </confidence>"
)


def test_official_amir_reward_on_the_prompt_format() -> None:
    completions = [FULL, UNBOXED, NO_CONFIDENCE_UNBOXED, DECIMAL, FRACTION]
    golds = ["18", "18", "18", "2.5", "0.5"]
    scores = RewardSuite(AMIR_GRPO_WEIGHTS, checking=AMIR_GRPO_CHECKING).score(completions, golds)
    columns = {name: column.tolist() for name, column in scores.columns.items()}
    # correctness: the last brace-free box, else the last number anywhere. UNBOXED's last number
    # is its confidence 0.9 (wrong); NO_CONFIDENCE_UNBOXED's is 18 (right); the box of FRACTION
    # has braces inside, so its last number 0.8 is read (wrong).
    assert columns["correctness"] == [2.0, 0.0, 2.0, 2.0, 0.0]
    # format: four blocks and p in [0, 1]; NO_CONFIDENCE_UNBOXED has two blocks only.
    assert columns["format_official"] == [0.5, 0.5, 0.0, 0.5, 0.5]
    # integer: a number in the first <answer> block, decimals included ("2.5", the "2" of
    # \\frac{1}{2}).
    assert columns["integer_official"] == pytest.approx([0.2] * 5)
    assert columns["tag_count"] == pytest.approx([0.2, 0.2, 0.1, 0.2, 0.2])
    # calibration: 1 - (p - a)^2: 1 - 0.01; 1 - 0.81; p = 0.5 missing: 0.75; 1 - 0.09; 1 - 0.64
    assert columns["calibration_official"] == pytest.approx([0.99, 0.19, 0.75, 0.91, 0.36])
    # expression: "9 * 2 = 18" in the first three (FULL's "16 - 3 - 4 = 9" is no binary claim:
    # its "3 - 4 = 9" is wrong); DECIMAL and FRACTION state no "a OP b = c".
    assert columns["expression_official"] == pytest.approx([0.1, 0.1, 0.1, 0.0, 0.0])
    assert scores.total.tolist() == pytest.approx(
        [3.99, 0.1 + 0.5 + 0.2 + 0.2 + 0.19, 2.0 + 0.1 + 0.2 + 0.1 + 0.75, 3.81, 1.26]
    )
    assert [v.extracted for v in scores.verdicts] == ["18.0", "0.9", "18.0", "2.5", "0.8"]


def test_official_and_groupwise_rewards_differ_where_the_paper_code_is_strict() -> None:
    # Ours reads the unboxed answer block and pays the integer reward for integers only.
    completions, golds = [UNBOXED, DECIMAL], ["18", "2.5"]
    ours = RewardSuite(AMIR_GRPO_GROUPWISE_WEIGHTS).score(completions, golds)
    official = RewardSuite(AMIR_GRPO_WEIGHTS, checking=AMIR_GRPO_CHECKING).score(completions, golds)
    assert ours.columns["correctness"].tolist() == [2.0, 2.0]
    assert official.columns["correctness"].tolist() == [0.0, 2.0]
    assert ours.columns["integer"].tolist() == pytest.approx([0.2, 0.0])
    assert official.columns["integer_official"].tolist() == pytest.approx([0.2, 0.2])


@pytest.mark.parametrize(
    ("completion", "gold", "status", "extracted"),
    [
        ("\\boxed{1001}", "1000", "correct", "1001.0"),  # |1| <= 1e-3 * 1001
        ("\\boxed{1002}", "1000", "wrong", "1002.0"),  # |2| > 1e-3 * 1002
        ("\\boxed{0.5009}", "0.5", "correct", "0.5009"),  # |9e-4| <= abs_tol 1e-3
        ("\\boxed{0.502}", "0.5", "wrong", "0.502"),
        ("\\boxed{1,000}", "1000", "correct", "1000.0"),
        ("\\boxed{50%}", "50", "correct", "50.0"),  # a trailing % is dropped
        ("\\boxed{\u22125}", "-5", "correct", "-5.0"),  # a Unicode minus
        ("\\boxed{15cm}", "15", "wrong", "1.0"),  # "15" is glued to "cm": the regex backs to "1"
        ("\\boxed{x} then 7 and 8", "8", "correct", "8.0"),  # no number in the box: the last
        ("<think>\\boxed{3}</think> so 5", "3", "correct", "3.0"),  # reasoning is read too
        ("the answer is (C)", "C", "no_answer", None),
        ("\\boxed{7}", "\\frac{7}{1}", "wrong", "7.0"),  # a non-numeric gold: compared as text
    ],
)
def test_official_correctness(completion: str, gold: str, status: str, extracted: str) -> None:
    from groupwise.rewards import judge

    verdict = judge(completion, gold, "amir_official")
    assert (verdict.status, verdict.extracted) == (status, extracted)


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer> \\boxed{18} </answer>", 0.2),
        ("<answer> about 3.5 apples </answer>", 0.2),  # decimals count
        ("<ANSWER>12</ANSWER>", 0.2),  # tags in any case
        ("<answer> \\boxed{x} </answer> 5", 0.0),  # the number must be inside the block
        ("<answer> seven </answer>", 0.0),
        ("<answer> 7", 0.0),  # no closed block
        ("<answer> none </answer> <answer> 5 </answer>", 0.0),  # only the first block counts
        ("the answer is 7", 0.0),
    ],
)
def test_integer_official(completion: str, expected: float) -> None:
    assert integer_answer_official(completion, RIGHT) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<confidence> 0.9 </confidence>", 0.9),
        ("<confidence>.8</confidence>", 0.8),
        ("<confidence> 85% </confidence>", 0.5),  # not a bare number: the default
        ("<confidence> 0.7 (fairly sure) </confidence>", 0.5),
        ("<confidence> 1.5 </confidence>", 1.0),  # clipped
        ("<confidence> -0.2 </confidence>", 0.5),  # the sign is not read
        ("<confidence> high </confidence> <confidence> 0.6 </confidence>", 0.6),  # first bare one
        ("no block", 0.5),
    ],
)
def test_calibration_official_reads_bare_numbers(text: str, expected: float) -> None:
    # With a right answer, 1 - (p - 1)^2 gives p back.
    assert calibration_official(text, RIGHT) == pytest.approx(1 - (expected - 1) ** 2)


@pytest.mark.parametrize(
    ("text", "official", "ours"),
    [
        (FULL, 0.5, 0.5),
        (FULL + "\nThanks", 0.5, 0.0),  # text on a later line: the official `$` is a line end
        (FULL + "   \n\n Thanks", 0.5, 0.0),
        (FULL + " Thanks", 0.0, 0.0),  # on the same line: no line end after </confidence>
        (FULL.replace("0.9", "1.5"), 0.0, 0.0),
        ("Sure! " + FULL, 0.0, 0.0),
        (FULL + "\n<analysis> again </analysis> <confidence> 0.3 </confidence> x", 0.5, 0.0),
    ],
)
def test_strict_format_official_is_line_anchored(text: str, official: float, ours: float) -> None:
    assert strict_format_official(text, RIGHT) == official
    assert strict_format(text, RIGHT) == ours


def test_preset_constants() -> None:
    assert AMIR_GRPO_CHECKING == "amir_official" and LENS_CHECKING == "math_verify"
    assert set(AMIR_GRPO_WEIGHTS) == {
        "correctness",
        "expression_official",
        "format_official",
        "integer_official",
        "tag_count",
        "calibration_official",
    }
    assert all(weight == 1.0 for weight in AMIR_GRPO_WEIGHTS.values())
    with pytest.raises(ValueError, match=r"unknown checking mode 'official'.*'amir_official'"):
        RewardSuite(LENS_WEIGHTS, checking="official")


# ---------------------------------------------------------------------------------------------
# A plugin component that misbehaves is named in the error.


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), None, "0.5"])
def test_a_component_returning_a_non_number_is_named(bad: object) -> None:
    @register_component("broken_plugin_value")
    def broken(completion: str, verdict: Verdict) -> float:
        return bad if completion == "\\boxed{5}" else 0.0  # type: ignore[return-value]

    try:
        suite = RewardSuite({"binary": 1.0, "broken_plugin_value": 1.0})
        with pytest.raises(RewardError) as raised:
            suite.score(["\\boxed{4}", "\\boxed{5}"], ["4", "4"])
        message = str(raised.value)
        assert "'broken_plugin_value'" in message
        assert f"{__name__}.test_a_component_returning_a_non_number_is_named" in message
        assert f"returned {bad!r} for completion 1 of 2" in message
    finally:
        COMPONENTS.pop("broken_plugin_value")


def test_a_component_that_raises_is_named() -> None:
    @register_component("raising_plugin")
    def raising(completion: str, verdict: Verdict) -> float:
        raise KeyError("missing field")

    try:
        expected = r"'raising_plugin' \(.*raising\) raised on completion 0 of 1: KeyError"
        with pytest.raises(RewardError, match=expected):
            RewardSuite({"raising_plugin": 1.0}).score(["\\boxed{4}"], ["4"])
    finally:
        COMPONENTS.pop("raising_plugin")


def test_numbers_of_other_types_are_accepted() -> None:
    import numpy as np

    @register_component("numpy_plugin")
    def numpy_value(completion: str, verdict: Verdict) -> float:
        return np.float32(0.25) if verdict.correct else 1  # type: ignore[return-value]

    try:
        scores = RewardSuite({"numpy_plugin": 2.0}).score(["\\boxed{4}", "\\boxed{5}"], ["4", "4"])
        assert scores.total.tolist() == pytest.approx([0.5, 2.0])
    finally:
        COMPONENTS.pop("numpy_plugin")


def test_weighted_total_sums_as_the_official_code_so_pairs_at_the_margin_agree() -> None:
    """TRL sums the official reward_funcs' float32 columns [B, K] with nansum in their order
    (brier_score, xmlcount, strict format, int, correctness). A correct completion at
    confidence 0.8 and a wrong one at 0.2 (Brier terms 0.96 both), tag count 0.17, integer 0.2:
    their totals differ by exactly 2.0 there, so the margin-2.0 pair (gap > margin) is not
    formed; added in our weights' order the gap is 2.0000002 and the pair would be formed."""
    from groupwise.algorithms import mine_pairs
    from groupwise.rewards.suite import weighted_total

    official = ["calibration_official", "expression_official", "tag_count", "format_official"]
    official += ["integer_official", "correctness"]
    rows = [
        [1 - 0.2**2, 0.0, 0.175 - 0.005, 0.0, 0.2, 2.0],
        [1 - 0.2**2, 0.0, 0.175 - 0.005, 0.0, 0.2, 0.0],
    ]
    stacked = torch.tensor(rows, dtype=torch.float32)
    trl = (stacked * torch.ones(6, dtype=torch.float32).unsqueeze(0)).nansum(dim=1)
    columns = {name: stacked[:, i] for i, name in enumerate(official)}
    weights = dict.fromkeys(suite_module.AMIR_GRPO_WEIGHTS, 1.0)  # correctness first
    total = weighted_total(columns, weights)
    assert torch.equal(total, trl) and float(total[0] - total[1]) == 2.0
    sequential = torch.zeros(2)
    for name in weights:  # the former sum: left to right in the weights' order
        sequential = sequential + weights[name] * columns[name]
    assert float(sequential[0] - sequential[1]) == pytest.approx(2.0000002, abs=1e-7)
    assert float(sequential[0] - sequential[1]) != 2.0
    # whatever order the weights come in, the total is the same to the bit
    assert torch.equal(weighted_total(columns, dict(reversed(weights.items()))), trl)
    chosen, _ = mine_pairs(total, group_size=2, margin=2.0)
    assert chosen.numel() == 0
    chosen, _ = mine_pairs(sequential, group_size=2, margin=2.0)
    assert chosen.numel() == 1
    # weights scale the columns before the sum, as TRL's reward_weights
    scaled = weighted_total(columns, {**weights, "tag_count": 0.5})
    expected = (stacked * torch.tensor([1, 1, 0.5, 1, 1, 1]).unsqueeze(0)).nansum(dim=1)
    assert torch.equal(scaled, expected)


# expression_correctness_reward_func (AMIR-GRPO Train/rewards.py), by hand: +0.1 per claim
# "a OP b = c" whose a OP b is within 1e-6 of c, added one 0.1 at a time.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no arithmetic here, the answer is 18", 0.0),
        ("16 - 3 = 13", 0.1),
        ("16 - 3 = 12", 0.0),  # a wrong claim earns nothing, and costs nothing
        ("16-3=13 and 13 * 2 = 26 and 26 + 4 = 30", 0.1 + 0.1 + 0.1),  # 0.30000000000000004
        ("12 + 3 = 15, then 15 / 3 = 4", 0.1),  # one right, one wrong
        ("7 / 2 = 3.5", 0.1),
        ("1 / 3 = 0.333", 0.0),  # 1/3 is not within 1e-6 of 0.333
        ("5 / 0 = 0", 0.0),  # division by zero: _safe_compute gives None
        ("12.5 + 3.5 = 16.0", 0.1),
        ("2 * 3 = 6.0000001", 0.1),  # within 1e-6
        ("9  *\n 2   =   18", 0.1),  # any whitespace, newlines included, around OP and =
        ("16 \u2212 3 = 13", 0.0),  # Unicode minus: not one of the ASCII operators
        ("5 x 3 = 15, 5 \u00d7 3 = 15", 0.0),  # letter x and the times sign: no operator
        ("-5 + 3 = -2", 0.0),  # no sign on c: the claim does not match
        ("1,000 + 2 = 1,002", 0.0),  # read from "000 + 2 = 1": 2 is not 1
        ("2 + 3 = 5 + 1 = 6", 0.1),  # one binary claim, then " + 1 = 6" has no left side
        ("<think> 9 * 2 = 18 </think> <answer> 18 </answer>", 0.1),
    ],
)
def test_expression_official_by_hand(text: str, expected: float) -> None:
    assert expression_official(text, RIGHT) == expected
    assert expression_official(text, WRONG) == expected  # the verdict plays no part


def test_expression_official_sums_as_the_official_loop() -> None:
    three = "1 + 1 = 2; 2 + 2 = 4; 4 + 4 = 8"
    assert expression_official(three, RIGHT) == 0.30000000000000004  # 0.1 + 0.1 + 0.1
    assert COMPONENTS["expression_official"].bounds == (0.0, float("inf"))


_OFFICIAL_CLAIM = r"(\d+(?:\.\d+)?\s*[+\-*/]\s*\d+(?:\.\d+)?)\s*=\s*(\d+(?:\.\d+)?)"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.+-*/= ,x\n", max_size=40))
def test_expression_claims_are_the_official_regex_matches(text: str) -> None:
    """Our linear-time pattern finds exactly the official `_EXPR_CLAIM_PATTERN`'s claims."""
    import re

    from groupwise.rewards.official import _EXPRESSION_CLAIM

    assert _EXPRESSION_CLAIM.findall(text) == re.findall(_OFFICIAL_CLAIM, text)


def test_a_zero_weight_unbounded_part_leaves_the_reward_gap_finite() -> None:
    from groupwise.algorithms.targets import largest_reward_gap

    assert largest_reward_gap([(0.0, 2.0), (0.0, float("inf"))], [1.0, 0.0]) == 2.0
    assert largest_reward_gap([(0.0, 2.0), (0.0, float("inf"))], [1.0, 1.0]) == float("inf")
