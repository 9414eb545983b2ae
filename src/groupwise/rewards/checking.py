"""Answer checking: the verdict on one completion for its gold answer, under a checking mode
(docs/algorithms.md §2 and §3).

Checking modes (`MODES`, `judge(completion, gold, mode)`); each is documented with its source
at its declaration below:

- "groupwise" (ours, the default): our reading of the answer (answer block, boxes, `#### N`,
  "the answer is", multiple choice), math-verify's LaTeX and expression extraction where our
  rules find nothing, then our equivalence (fast paths, then math-verify).
- "math_verify" (LENS paper: "Math-Verify as verifier"): math-verify's own default `parse` of
  the whole completion and `verify`, nothing else.
- "amir_official" (AMIR-GRPO official code, training reward): the last brace-free `\\boxed{}`
  or the last number, compared numerically within 1e-3.
- "amir_eval" (AMIR-GRPO official code, evaluation grader): no `<answer>...</answer>` block
  means wrong; the last box after the last `<answer>`, else all of it; our equivalence.

The groupwise equivalence of an extracted answer and a gold (`answers_equivalent`), cheapest
test first:

1. identical after removing spacing (`\\left`, `\\,`, blanks) and `$`: correct;
2. both plain decimal numbers: equal values are correct (0072 = 72.0; "1,22" is 1.22 when the
   other side is one number); unequal integers are wrong; other unequal decimals go on to
   math-verify for its rounding to 6 places;
3. math-verify (`parse` of each side wrapped in `\\boxed{}`, a gold that carries its own
   delimiters as it is; `verify(gold, answer)`): fractions vs decimals, radicals, intervals,
   tuples, sets in any order, relations, matrices, units and `\\text{}`, degrees, percents,
   `x = 3` forms, symbolic equivalence;
4. when math-verify reads no expression on a side (`0.\\overline{3}`, plain words): a
   case-insensitive text comparison, and the verdict's detail starts with "unparsed" so that
   it is counted (see `pool.summarize`) and logged.

A gold that is a single option letter A-E (AQUA-RAT) is compared with `extract_choice`.

These functions have no time limit (math-verify's own `signal.alarm` timeouts are disabled:
they fail off the main thread); `groupwise.rewards.pool` runs them in worker processes
under hard timeouts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Literal

from groupwise.rewards.extract import (
    Reading,
    choice_letter,
    clean_answer,
    extract_answer,
    extract_choice,
    gold_choice,
    read_answer,
    unwrap_text,
)
from groupwise.rewards.latex_parser import repair_latex_parser
from groupwise.rewards.official import (
    official_correct,
    official_eval_answer,
    official_numeric_answer,
)

__all__ = [
    "DEFAULT_MODE",
    "MODES",
    "UNPARSED",
    "CheckingMode",
    "Mode",
    "Verdict",
    "answers_equivalent",
    "checking_mode",
    "judge",
]

# Under antlr4 4.9.3 (hydra's pin, so beside verl) math-verify's parser misses an accessor and
# reads no percentage (latex_parser.py; docs/guides/verl.md, "Answer checking beside verl").
repair_latex_parser()

Status = Literal["correct", "wrong", "no_answer", "timeout", "error"]
UNPARSED = "unparsed"
"""Prefix of the detail of a verdict reached without math-verify understanding a side."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one completion against its gold answer.

    status: "correct" | "wrong" | "no_answer" (nothing extractable) | "timeout" (the check
    overran its deadline) | "error" (the check raised or its worker died).
    extracted: the answer read from the completion (a letter for multiple choice), or None.
    detail: how the verdict was reached ("identical", "numeric", "math-verify", "choice",
    "unparsed answer: compared as text", ...) or what went wrong.
    """

    status: Status
    extracted: str | None
    detail: str = ""

    @property
    def correct(self) -> bool:
        return self.status == "correct"


def _decided(correct: bool, extracted: str | None, detail: str) -> Verdict:
    return Verdict("correct" if correct else "wrong", extracted, detail)


# ---------------------------------------------------------------------------------------------
# Equivalence (groupwise)

_SPACING = re.compile(r"\\left|\\right|\\[,;:! ]|\s+")
_DECIMAL = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$")
_DECIMAL_COMMA = re.compile(r"^[-+]?\d+,\d+$")
_INTEGER = re.compile(r"^[-+]?\d+$")
_SCIENTIFIC = re.compile(r"^([-+]?\d+(?:\.\d+)?)[eE]([-+]?\d+)$")
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:,\\!|,\\,|\{,\}|\\,)(?=\d{3}(?!\d))")
_DANGLING_POINT = re.compile(r"(?<=\d)\.(?=/)")
# A gold that still holds math delimiters or a box once its outer ones are stripped ("$21,16$
# or $11$", "\\boxed{2}, \\boxed{3}") is read by math-verify's extraction as it is.
_OWN_DELIMITERS = re.compile(r"(?<!\\)\$|\\[(\[]|\\boxed")


def _normalize(answer: str) -> str:
    """One side of a comparison made ready for math-verify: no `$` math delimiters, no `\\$`
    currency, a Unicode minus as "-", no LaTeX thousands separators (`5,\\!525`, `1\\,000`,
    `10{,}000`: math-verify reads `1\\,000` as 1*0), no dangling decimal point ("-1./3"), and
    "4.5e33" written as `4.5\\times 10^{33}`."""
    text = _UNESCAPED_DOLLAR.sub("", answer.replace("\\$", "")).replace("\u2212", "-").strip()
    text = _DANGLING_POINT.sub("", _LATEX_THOUSANDS.sub("", text))
    scientific = _SCIENTIFIC.match(text)
    if scientific:
        text = f"{scientific.group(1)}\\times 10^{{{scientific.group(2)}}}"
    return text


def _squash(text: str) -> str:
    return _SPACING.sub("", text)


def _as_text(text: str) -> str:
    return _squash(unwrap_text(text)).lower()


def _latex_config() -> list[Any]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]


@lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[Any, ...]:
    """math-verify's reading of an extracted answer (wrapped in `\\boxed{}`); () when it finds
    nothing. Cached: the same gold is checked once per completion of its group."""
    from math_verify import parse

    boxed = f"\\boxed{{{text}}}"
    return tuple(parse(boxed, extraction_config=_latex_config(), parsing_timeout=None))


@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple[Any, ...]:
    """math-verify's reading of a gold answer: as `_parse` after tidying, or, for a gold that
    carries its own delimiters inside ("$21,16$ or $11$"), math-verify's extraction of it."""
    cleaned = clean_answer(gold) or ""
    if _OWN_DELIMITERS.search(cleaned):
        from math_verify import parse

        return tuple(parse(gold, extraction_config=_latex_config(), parsing_timeout=None))
    return _parse(_normalize(cleaned))


def _has_expression(parsed: tuple[Any, ...]) -> bool:
    """Whether math-verify read a sympy object (it returns only the raw string when it cannot,
    e.g. for `0.\\overline{3}`)."""
    return any(not isinstance(item, str) for item in parsed)


def _verify(gold_parsed: tuple[Any, ...], answer_parsed: tuple[Any, ...]) -> bool:
    from math_verify import verify

    return bool(verify(list(gold_parsed), list(answer_parsed), timeout_seconds=None))


def _plain_numbers(answer: str, gold: str) -> tuple[Decimal, Decimal] | None:
    """Both sides (normalized) as numbers when both are plain decimals (spacing ignored),
    reading "1,22" with a decimal comma when the other side is a plain number ("1, 22" is a
    list; thousands were removed by `clean_answer`)."""
    numbers = []
    for text, other in ((answer, gold), (gold, answer)):
        if _DECIMAL.match(_squash(text)):
            numbers.append(_squash(text))
        elif _DECIMAL_COMMA.match(text) and _DECIMAL.match(_squash(other)):
            numbers.append(text.replace(",", "."))
        else:
            return None
    try:
        return Decimal(numbers[0]), Decimal(numbers[1])
    except InvalidOperation:
        return None


def answers_equivalent(answer: str, gold: str) -> tuple[bool, str]:
    """(equivalent, how) for an extracted answer and a gold answer (both strings).

    No timeout of its own: call it through `check_answers` / `is_correct` unless the inputs
    are trusted. See the module docstring for the order of the tests.
    """
    # Both sides tidied alike: a gold can end in a period too ("\\frac{7}{5} + \\frac{1}{5} i.").
    answer, tidy_gold = _normalize(clean_answer(answer) or ""), _normalize(clean_answer(gold) or "")
    if _squash(answer) == _squash(tidy_gold):
        return True, "identical"
    numbers = _plain_numbers(answer, tidy_gold)
    if numbers is not None:
        if numbers[0] == numbers[1]:
            return True, "numeric"
        if _INTEGER.match(_squash(answer)) and _INTEGER.match(_squash(tidy_gold)):
            return False, "numeric"
    gold_parsed, answer_parsed = _parse_gold(gold), _parse(answer)
    if _has_expression(gold_parsed) and _has_expression(answer_parsed):
        return _verify(gold_parsed, answer_parsed), "math-verify"
    side = "answer" if not _has_expression(answer_parsed) else "gold"
    return _as_text(answer) == _as_text(tidy_gold), f"{UNPARSED} {side}: compared as text"


# ---------------------------------------------------------------------------------------------
# The checking modes


def _choice_verdict(completion: str, letter: str) -> Verdict:
    chosen = extract_choice(completion)
    if chosen is None:
        return Verdict("no_answer", None, "no option letter found")
    return _decided(chosen == letter, chosen, "choice")


def _math_verify_extraction(region: str) -> tuple[str, tuple[Any, ...]] | None:
    """(matched text, parse) of math-verify's LaTeX and expression extraction on `region`
    (its last LaTeX span or expression by its priorities); None when it matches nothing."""
    from math_verify import parse

    parsed = tuple(parse(region, extraction_config=_latex_config(), parsing_timeout=None))
    if not parsed:
        return None
    texts = [item for item in parsed if isinstance(item, str)]
    return (texts[0] if texts else str(parsed[0])), parsed


def judge_groupwise(completion: str, gold: str) -> Verdict:
    """Mode "groupwise" (ours; docs/algorithms.md §2, "Rewards of AMIR-GRPO", correctness): see the
    module docstring.

    The answer is `read_answer`'s (rules of `groupwise.rewards.extract`); when those find none,
    math-verify's extraction on the answer region, compared with `verify`; when that finds no
    expression, the rules' fallback (a prose value, or the last number of a region without
    LaTeX), else the text math-verify matched.
    """
    letter = gold_choice(gold)
    if letter is not None:
        return _choice_verdict(completion, letter)
    reading: Reading = read_answer(completion)
    answer = reading.answer
    if answer is None and reading.region is not None:
        found = _math_verify_extraction(reading.region)
        if found is not None and _unevaluated(found[0], gold):
            # "8 + 4 - 4, which is 8": the value stated after the arithmetic, if any
            after = reading.region[reading.region.rfind(found[0]) + len(found[0]) :]
            numbers = _LAST_NUMBER.findall(after)
            answer = numbers[-1] if numbers else found[0]
        elif found is not None and _has_expression(found[1]):
            text, parsed = found
            # A number equal to the gold as a plain number ("1.22" for "1,22") needs no sympy.
            numbers = _plain_numbers(text, _normalize(clean_answer(gold) or ""))
            if numbers is not None and numbers[0] == numbers[1]:
                return _decided(True, text, "numeric")
            gold_parsed = _parse_gold(gold)
            if _has_expression(gold_parsed):
                return _decided(_verify(gold_parsed, parsed), text, "math-verify extraction")
        if answer is None:
            answer = reading.fallback or (found[0] if found is not None else None)
    if answer is None:
        return Verdict("no_answer", None, "no answer found")
    if _unevaluated(answer, gold):
        return Verdict("wrong", answer, UNEVALUATED)
    equivalent, how = answers_equivalent(answer, gold)
    return _decided(equivalent, answer, how)


UNEVALUATED = "unevaluated arithmetic: the answer is a sum, difference, product or quotient"
"""Detail of a groupwise verdict on an answer left as arithmetic of plain numbers."""

# Two or more plain numbers joined by + - * x / and brackets, nothing else: "8 + 4 - 4",
# "(3 + 5) \times 2". A single quotient "1/2" is a value (a fraction), so it does not count.
_NUMBER = r"[-+]?\d+(?:\.\d+)?"
_OPERATOR = r"(?:[-+*/×÷·]|\\times|\\cdot|\\div)"
_ARITHMETIC = re.compile(rf"^[(\[]*{_NUMBER}[)\]]*(?:{_OPERATOR}[(\[]*{_NUMBER}[)\]]*)+$")
_FRACTION = re.compile(rf"^{_NUMBER}/\d+$")
_LAST_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _unevaluated(answer: str, gold: str) -> bool:
    """The answer is arithmetic of plain numbers left for the reader to compute ("8 + 4 - 4",
    "\\boxed{3 \\times 4}") while the gold is a plain number: groupwise counts it wrong.
    Math-verify evaluates such an answer and accepts it, so on a task whose question is the
    arithmetic ("What is 8 + 4 - 4?", `arith` with `form: expression`) restating the question
    would earn the reward. Where math-verify's extraction finds such arithmetic, the last
    number stated after it is the answer ("8 + 4 - 4, which is 8"), if there is one
    (docs/algorithms.md §2, "Rewards of AMIR-GRPO")."""
    squashed = _squash(_normalize(answer))
    if not _DECIMAL.match(_squash(_normalize(clean_answer(gold) or gold))):
        return False
    return bool(_ARITHMETIC.match(squashed)) and not _FRACTION.match(squashed)


@lru_cache(maxsize=4096)
def _math_verify_gold(gold: str) -> tuple[Any, ...]:
    """math-verify's default parse of a gold (see `judge_math_verify`); cached per gold."""
    from math_verify import parse

    text = gold if _OWN_DELIMITERS.search(gold) else f"\\boxed{{{gold}}}"
    return tuple(parse(text, parsing_timeout=None))


def judge_math_verify(completion: str, gold: str) -> Verdict:
    """Mode "math_verify" (LENS paper, section 6: "Math-Verify as verifier for training and
    evaluation"; docs/algorithms.md §3): `verify(parse(gold), parse(completion))` with math-verify's
    defaults (LaTeX then expression extraction, boxes at priority 50, first-match fallback,
    float rounding 6, strict), on the whole completion: no reasoning removed, no answer block
    read, no multiple-choice rule.

    The gold is parsed as given when it has its own delimiters (`$`, `\\(`, `\\[`, a box);
    a bare gold (a data set's answer field: "18", "\\sqrt{2}") is wrapped in `\\boxed{}` first,
    as verl's math-verify reward does (bare, `\\sqrt{2}` would be read as the number 2).
    math-verify's own timeouts are off (they fail off the main thread); the worker pool's hard
    timeout replaces them and is reported as a "timeout" verdict where math-verify would
    silently say wrong.
    """
    from math_verify import parse

    answer = tuple(parse(completion, parsing_timeout=None))
    if not answer:
        return Verdict("no_answer", None, "math-verify found no answer")
    texts = [item for item in answer if isinstance(item, str)]
    extracted = texts[0] if texts else str(answer[0])
    return _decided(_verify(_math_verify_gold(gold), answer), extracted, "math-verify")


def judge_amir_official(completion: str, gold: str) -> Verdict:
    """Mode "amir_official" (AMIR-GRPO official code, `Train/rewards.py`
    `correctness_reward_func`; docs/algorithms.md §2, "Rewards of AMIR-GRPO", correctness): the
    first number of the last brace-free `\\boxed{}` anywhere in the completion (reasoning included),
    else the last number anywhere (often the `<confidence>` value), compared with the gold within
    1e-3 (`groupwise.rewards.official.official_correct`). No math-verify: an answer like
    `\\boxed{\\frac{1}{2}}` is read as its last number.
    """
    correct, value = official_correct(completion, gold)
    if value is None:
        return Verdict("no_answer", None, "no number found (official reading)")
    return _decided(correct, repr(value), "official: numeric within 1e-3")


def judge_amir_eval(completion: str, gold: str) -> Verdict:
    """Mode "amir_eval" (AMIR-GRPO official code, `Data/math_grader.py`
    `answer_tag_reward_fn_for_orz`, the evaluation grader; docs/algorithms.md §2, "Evaluation of
    AMIR-GRPO"): a completion without both `<answer>` and `</answer>` has no answer (wrong); the
    answer is the last box after the last `<answer>`, else all the text after it
    (`official.official_eval_answer`).

    The comparison is ours (`answers_equivalent`; an option-letter gold by `choice_letter`):
    the official grader ORs three graders (Hendrycks' MATH normalisation, the PRM800K sympy
    grader and math-verify) that are not reproduced here.
    """
    has_block, answer = official_eval_answer(completion)
    if not has_block:
        return Verdict("no_answer", None, "no <answer>...</answer> block (official grader)")
    cleaned = clean_answer(answer) if answer is not None else None
    if cleaned is None:
        return Verdict("no_answer", None, "no readable answer after <answer> (official grader)")
    letter = gold_choice(gold)
    if letter is not None:
        chosen = choice_letter(cleaned)
        return _decided(chosen == letter, chosen or cleaned, "choice")
    equivalent, how = answers_equivalent(cleaned, gold)
    return _decided(equivalent, cleaned, how)


# ---------------------------------------------------------------------------------------------
# The registry


@dataclass(frozen=True)
class CheckingMode:
    """A way of judging answers. judge: (completion, gold) -> Verdict, run in a worker.
    extract: (completion, gold) -> the answer `judge` would report, cheap enough for the parent
    process (no sympy), for verdicts a worker never sent (timeouts, crashes); None if unknown.
    source: where the semantics come from (paper / official code / ours, docs/algorithms.md)."""

    name: str
    judge: Callable[[str, str], Verdict]
    extract: Callable[[str, str], str | None]
    source: str


def _extract_groupwise(completion: str, gold: str) -> str | None:
    return extract_choice(completion) if gold_choice(gold) else extract_answer(completion)


def _extract_amir_official(completion: str, gold: str) -> str | None:
    value = official_numeric_answer(completion)
    return None if value is None else repr(value)


def _extract_amir_eval(completion: str, gold: str) -> str | None:
    answer = official_eval_answer(completion)[1]
    return None if answer is None else clean_answer(answer)


Mode = Literal["groupwise", "math_verify", "amir_official", "amir_eval"]
DEFAULT_MODE: Mode = "groupwise"
MODES: dict[str, CheckingMode] = {
    mode.name: mode
    for mode in (
        CheckingMode(
            "groupwise",
            judge_groupwise,
            _extract_groupwise,
            "ours (docs/algorithms.md §2, correctness): our answer rules, then math-verify's "
            "extraction; math-verify equivalence",
        ),
        CheckingMode(
            "math_verify",
            judge_math_verify,
            lambda completion, gold: None,
            "LENS paper (docs/algorithms.md §3): math-verify's default parse and verify",
        ),
        CheckingMode(
            "amir_official",
            judge_amir_official,
            _extract_amir_official,
            "AMIR-GRPO official code (docs/algorithms.md §2): correctness_reward_func",
        ),
        CheckingMode(
            "amir_eval",
            judge_amir_eval,
            _extract_amir_eval,
            "AMIR-GRPO official code (docs/algorithms.md §2, evaluation): "
            "answer_tag_reward_fn_for_orz reading, our equivalence",
        ),
    )
}
"""The checking modes by name (see each `judge_*` function for its exact semantics)."""


def checking_mode(name: str) -> CheckingMode:
    """The checking mode `name`; an unknown name raises naming the valid ones."""
    if name not in MODES:
        raise ValueError(f"unknown checking mode {name!r}; valid modes: {sorted(MODES)}")
    return MODES[name]


def judge(completion: str, gold: str, mode: str = DEFAULT_MODE) -> Verdict:
    """The verdict on `completion` for `gold` under checking mode `mode`, computed in this
    process with no time limit.

    Pathological answers can make math-verify (sympy) run for minutes: use `check_answers` or
    `is_correct`, which run this under a hard timeout.
    """
    return checking_mode(mode).judge(completion, gold)
