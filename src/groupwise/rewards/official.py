"""The AMIR-GRPO official code's answer readings, reproduced to the letter (docs/algorithms.md §2,
"Rewards of AMIR-GRPO" and "Evaluation of AMIR-GRPO").

Source: github.com/AmirHosseinYari2002/AMIR-GRPO (arXiv 2601.03661, on TRL 0.23):
- `Data/data.py`: `_NUMBER_RE`, `_BOXED_RE`, `_clean_to_float`, `extract_numeric_answer`,
  `extract_xml_answer`;
- `Train/rewards.py`: `correctness_reward_func` (tolerance 1e-3), `int_reward_func`,
  `_STRICT_XML_WITH_CALIB_PATTERN`, `extract_confidence`, `expression_correctness_reward_func`
  (`_EXPR_CLAIM_PATTERN`, `_safe_compute`);
- `Data/math_grader.py`: `answer_tag_reward_fn_for_orz` and `last_boxed_only_string` /
  `remove_boxed` (the evaluation grader's reading of the answer).

Pure string functions with linear-time regexes; the checking modes that use them live in
`groupwise.rewards.checking`, the reward components in `groupwise.rewards.components`.
"""

from __future__ import annotations

import math
import operator
import re

__all__ = [
    "OFFICIAL_TOLERANCE",
    "official_answer_block",
    "official_confidence",
    "official_correct",
    "official_eval_answer",
    "official_expression_reward",
    "official_gold_value",
    "official_numeric_answer",
]

OFFICIAL_TOLERANCE = 1e-3
"""`correctness_reward_func(tol=1e-3)`: math.isclose with rel_tol = abs_tol = 1e-3, so numbers
above 1 are compared relatively: 1000 and 1001 are equal, 18 and 18.1 are not."""

# `_NUMBER_RE`: an optional sign (ASCII or Unicode minus), an integer with or without comma
# thousands, an optional decimal part and exponent, an optional percent sign; not glued to a
# letter or underscore on either side. Python's backtracking is part of the definition ("15cm"
# gives "1"), so the pattern keeps the official structure.
_NUMBER = re.compile(
    r"(?<![A-Za-z_])[-+\u2212]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?)%?"
    r"(?![A-Za-z_])"
)
# `_BOXED_RE`: a box whose content has no brace at all (`\boxed{\frac{1}{2}}` does not match).
_BOXED = re.compile(r"\\boxed\s*\{\s*([^{}]+?)\s*\}", re.DOTALL)
# `extract_xml_answer`: the first block, case-insensitive, closed.
_ANSWER_BLOCK = re.compile(r"<answer>\s*([\s\S]*?)\s*</answer>", re.IGNORECASE)
# `extract_confidence`: the first closed block holding only a bare non-negative number.
_CONFIDENCE = re.compile(r"<confidence>\s*([0-9]*\.?[0-9]+)\s*</confidence>")
# `_EXPR_CLAIM_PATTERN`: "a OP b = c", unsigned decimals, one ASCII operator (+ - * /). The
# lookbehind is ours and changes no match: a claim never ends inside a run of digits (its last
# number is greedy), so a start inside a run is tried only after the run's first digit failed,
# and then fails too; without it a long run of digits costs quadratic time.
_EXPRESSION_CLAIM = re.compile(
    r"(?<!\d)(\d+(?:\.\d+)?\s*[+\-*/]\s*\d+(?:\.\d+)?)\s*=\s*(\d+(?:\.\d+)?)"
)
_OPERATORS = (
    ("+", operator.add),
    ("-", operator.sub),
    ("*", operator.mul),
    ("/", operator.truediv),
)


def _to_float(number: str) -> float | None:
    """`_clean_to_float`: LaTeX percent, Unicode minus, `$`, `\\,` and commas removed, a
    trailing % dropped (50% is 50.0), then float(); None when that fails."""
    text = (
        number.replace("\\%", "%")
        .replace("\u2212", "-")
        .replace("$", "")
        .replace("\\,", "")
        .replace(",", "")
        .strip()
    )
    text = text.removesuffix("%")
    try:
        return float(text)
    except ValueError:
        return None


def official_numeric_answer(text: str) -> float | None:
    """`extract_numeric_answer`: the first number inside the last brace-free `\\boxed{}` of
    `text`, else the last number anywhere in `text` (often the `<confidence>` value), as a
    float; None when `text` has no number."""
    boxes = _BOXED.findall(text)
    if boxes:
        inner = _NUMBER.search(boxes[-1])
        if inner is not None and (value := _to_float(inner.group(0))) is not None:
            return value
    numbers = _NUMBER.findall(text)
    return _to_float(numbers[-1]) if numbers else None


def official_gold_value(gold: str) -> float | None:
    """`_parse_float_maybe(str(gt))`: float() of the gold without commas; None if not a number."""
    try:
        return float(gold.replace(",", "").strip())
    except ValueError:
        return None


def official_correct(completion: str, gold: str) -> tuple[bool, float | None]:
    """(correct, extracted value) under `correctness_reward_func`: the numbers within
    `OFFICIAL_TOLERANCE` when both sides are numbers, else the case-insensitive comparison of
    `str(value)` with the gold ("18.0" never equals a non-numeric gold).

    The official string comparison also makes a missing answer ("None") equal to the gold
    "None"; no benchmark has that gold, and it is left out here.
    """
    value = official_numeric_answer(completion)
    gold_value = official_gold_value(gold)
    if value is None:
        return False, None
    if gold_value is not None:
        close = math.isclose(
            value, gold_value, rel_tol=OFFICIAL_TOLERANCE, abs_tol=OFFICIAL_TOLERANCE
        )
        return close, value
    return str(value).strip().lower() == gold.strip().lower(), value


def official_answer_block(completion: str) -> str | None:
    """`extract_xml_answer`: the stripped content of the first closed `<answer>...</answer>`
    block (tags in any case), or None when there is none (the official code returns "")."""
    match = _ANSWER_BLOCK.search(completion)
    return match.group(1).strip() if match else None


def official_confidence(completion: str) -> float:
    """`extract_confidence`: the first `<confidence>` block that holds only a bare number
    ("0.8", ".8"; not "85%", "0.8 (sure)" or "-0.2"), clipped to [0, 1]; 0.5 when none."""
    match = _CONFIDENCE.search(completion)
    return 0.5 if match is None else max(0.0, min(float(match.group(1)), 1.0))


def _safe_compute(expression: str) -> float | None:
    """`_safe_compute`: `a OP b` split at the first operator found in the order + - * /, both
    sides read as `official_gold_value` reads a number; None on a division by zero or an
    unreadable side (inf and nan pass through, as in float arithmetic)."""
    for symbol, apply in _OPERATORS:
        if symbol in expression:
            left, right = expression.split(symbol, 1)
            a, b = official_gold_value(left), official_gold_value(right)
            if a is None or b is None or (symbol == "/" and b == 0):
                return None
            return apply(a, b)
    return None


def official_expression_reward(completion: str) -> float:
    """`expression_correctness_reward_func`: +0.1 for each claim "a OP b = c" in `completion`
    whose computed a OP b is within 1e-6 of c, summed one 0.1 at a time as the official loop
    does (three correct claims give 0.30000000000000004). Claims are unsigned decimals with an
    ASCII operator: "5 \u2212 3 = 2", "5 x 3 = 15", "-5 + 3 = -2" and "1,000 + 2 = 1,002" (read
    from "000") earn nothing; "7 / 2 = 3.5" earns 0.1, "1 / 3 = 0.333" and "5 / 0 = 0" nothing."""
    reward = 0.0
    for expression, claimed in _EXPRESSION_CLAIM.findall(completion):
        computed = _safe_compute(expression)
        if computed is not None and abs(computed - float(claimed)) < 1e-6:
            reward += 0.1
    return reward


def _last_box_content(text: str) -> str | None:
    """`last_boxed_only_string` then `remove_boxed`: from the last `\\boxed` (else the last
    `\\fbox`), the text up to the brace that balances the first `{`; its content only when it
    starts with `\\boxed{` exactly (`\\boxed {5}` and `\\fbox{5}` give None), None when the
    braces never balance."""
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                box = text[start : i + 1]
                return box[len("\\boxed{") : -1] if box.startswith("\\boxed{") else None
    return None


def official_eval_answer(completion: str) -> tuple[bool, str | None]:
    """(has_answer_block, answer) as `answer_tag_reward_fn_for_orz` reads them.

    has_answer_block: both `<answer>` and `</answer>` occur (else the official grader gives 0).
    answer: the text after the last `<answer>` with every `</answer>` removed; when it holds
    `\\boxed`, the content of its last box instead (None when that box cannot be read: the
    official grader gives 0). Unlike the official evaluation, which decodes the prompt with
    the completion, only the completion is read: a completion without its own `<answer>` block
    has no answer here, where the official code would read the prompt's template block.
    """
    if "<answer>" not in completion or "</answer>" not in completion:
        return False, None
    answer = completion.split("<answer>")[-1].replace("</answer>", "")
    if "\\boxed" in answer:
        return True, _last_box_content(answer)
    return True, answer
