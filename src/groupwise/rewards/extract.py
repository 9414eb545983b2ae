"""Final-answer extraction from a completion, the way a careful human grader reads it.

Pure string functions (no sympy, no math-verify): cheap, linear-time regexes only, so they are
safe to run in the training process. The comparison of an extracted answer with the gold one
lives in `groupwise.rewards.checking`.

Where the answer is looked for (docs/algorithms.md §2, "Rewards of AMIR-GRPO", correctness;
`read_answer`, first rule that applies wins):

1. Reasoning never counts: every `<think>...</think>` block is removed; text before a stray
   `</think>` (its `<think>` was in the prompt) and after an unclosed `<think>` is reasoning too.
2. If an `<answer>...</answer>` block remains, only the last one is read (an unclosed `<answer>`,
   e.g. a truncated completion, reads to the end): the *region*. Otherwise the region is the
   whole (reasoning-free) completion.
3. The last `\\boxed{...}` / `\\fbox{...}` / `\\framebox{...}` of the region (balanced braces,
   escaped braces ignored, a box wrapping a box unwrapped), read together with the boxes just
   before it that only a connector separates (`\\boxed{1}, \\boxed{2} and \\boxed{3}` is the
   set "1, 2, 3"; repeats of the same box count once).
4. Inside an answer block: "the answer is ...", else `#### N`, else the whole block; outside:
   the last `#### N` line, else the last "the answer is ..." / "Final answer: ...". A value in
   prose ("the largest $n$ is 34") is not taken here: it is left to math-verify's extraction.
5. (In `checking`, not here: math-verify's LaTeX and expression extraction on the region.)
6. The prose value of rule 4, else the last number of the region, but never when the region
   holds LaTeX math (a `$...$`, `\\(...\\)`, `\\[...\\]` span or a command such as `\\frac`):
   `$\\frac13$` is not "3".

`extract_answer` applies rules 1-4 and 6 (no math-verify): the cheap reading that the parent
process reports for a check that timed out. Multiple-choice answers (a letter A-E) are read by
`extract_choice`.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = [
    "Reading",
    "answer_region",
    "box_group",
    "choice_letter",
    "clean_answer",
    "extract_answer",
    "extract_choice",
    "find_boxed",
    "gold_choice",
    "has_latex",
    "last_boxed",
    "read_answer",
    "strip_reasoning",
    "unwrap_text",
]

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox|framebox)(?![A-Za-z])")
_OPTIONAL_ARGUMENT = re.compile(r"\[[^\]\n]{0,40}\]")
_BOX_TOKEN = re.compile(r"[^\s$]+")
# "the answer is X", "Final answer: X", "answer = X"; "the answer depends on" does not match.
_ANSWER_PHRASE = re.compile(r"\banswer\b\s*(?:is\b\s*:?|:|=)[ \t]*", re.IGNORECASE)
_FINAL_ANSWER = re.compile(r"\bfinal\s+answer\b", re.IGNORECASE)
_VALUE_START = re.compile(r"\s*(?:\$|\\[(\[]|[-+]?\.?\d)")
_HASH_ANSWER = re.compile(r"####[ \t]*([^\n]*)")
# A number not glued to a word or to a previous digit/dot ("10-5" gives 10 and 5, "x=-5" -5);
# thousands separators only in groups of three, an optional fraction bar ("3/4").
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|(?<![\w.])-?\.\d+")
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
_MATH_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
# Thousands separators inside a plain number, commas or spaces ("7,425,000", "1 000"); "1, 2"
# (a list) is left alone, and so is "0,111" (a decimal comma: no number starts with 0).
_THOUSANDS = re.compile(r"^-?[1-9]\d{0,2}(?:(?:,\d{3})+|(?: \d{3})+)(?:\.\d+)?$")
_CURRENCY = re.compile(r"^\\?\$\s*(?=[-\d.])")
# A number followed by plain words ("18 dollars", "5 apples per day"): the words are dropped.
# Short words stay (units math-verify knows, like "cm") and so do connectives of a list.
_NUMBER_THEN_WORDS = re.compile(r"^(-?\d[\d,]*(?:\.\d+)?)\s+([A-Za-z]{3,}(?:\s+[A-Za-z]{3,})*)$")
_KEEP_WORDS = frozenset({"and", "or", "not", "times", "plus", "minus", "over", "sqrt", "mod"})

_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textrm|mbox)\s*\{([^{}]*)\}")


def unwrap_text(text: str) -> str:
    """`text` with each brace-free `\\text{...}` (textbf, mathrm, mathbf, textrm, mbox) replaced
    by its contents."""
    return _TEXT_WRAPPER.sub(r"\1", text)


_CHOICE_FORM = re.compile(r"^\(?([A-E])\)?(?:$|[\s.:)\]]|\\)")
# Case-insensitive words, but the letter itself must be a capital ("the answer is a number").
# No two adjacent optional-whitespace runs: a failed match must not backtrack quadratically.
_CHOICE_PHRASE = re.compile(
    r"(?i:\banswer\b\s*(?:is\b|[:=])|\b(?:option|choice)\b(?:\s+is\b)?)"
    r"\s*(?::\s*)?\(?([A-E])(?![A-Za-z])"
)
_CHOICE_GOLD = re.compile(r"^\(?([A-E])\)?$")
# What may stand between two boxes read as one answer: spacing, punctuation, math delimiters,
# "and" / "or" (plain or in \\text{}), and the name the next box gives its value ("y_2 =", as
# in "$y_1 = \\boxed{3}$ and $y_2 = \\boxed{4}$", which math-verify reads as one answer).
# Anything else (" for part (a) and ") ends the group.
_BOX_JOIN = re.compile(
    r"(?:\s|[,;&$]|\\[\[\]()]|\\q?quad\b|\\[,;:! ]"
    r"|\\text\s*\{\s*(?:and|or|[,;])?\s*\}|\band\b|\bor\b"
    r"|(?<![A-Za-z\\])[A-Za-z](?:_\{?[A-Za-z0-9]{1,3}\}?)?'?\s*=)*\Z"
)
# LaTeX math in a text: a closed inline/display span or a command other than a box, \\text, \\$
# and \\% ("it costs $5" is prose; "$\\frac13$" and "\\frac{10}{9}" are math).
_LATEX_MATH = re.compile(
    r"(?<!\\)\$[^$\n]+(?<!\\)\$|\\\(|\\\["
    r"|\\(?!(?:boxed|fbox|framebox|text|textbf|mbox)(?![A-Za-z]))[A-Za-z]+"
)
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+|\\.")
_TEXT_BLOCK = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{[^{}]*\}")
# Two words in a row (after commands and \\text{} are removed): a sentence, not a value.
# Starts only at a word's start: a long word is scanned once, not once per letter.
_PROSE = re.compile(r"(?<![A-Za-z])[A-Za-z]{2,}[\s,;]+[A-Za-z]{2,}")


def strip_reasoning(text: str) -> str:
    """`text` without its reasoning: `<think>` blocks, text before a stray `</think>`, and
    everything from an unclosed `<think>` on. Linear time (str.find, no lazy regex)."""
    kept = []
    pos = 0
    while True:
        opening = text.find("<think>", pos)
        if opening < 0:
            kept.append(text[pos:])
            break
        kept.append(text[pos:opening])
        closing = text.find("</think>", opening)
        if closing < 0:
            break
        kept.append(" ")
        pos = closing + len("</think>")
    remaining = "".join(kept)
    return remaining.rsplit("</think>", 1)[1] if "</think>" in remaining else remaining


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of each `{` -> index of its matching `}`, in one pass; `\\{` and `\\}` (literal
    braces in LaTeX) are skipped, unmatched braces left out."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            stack.append(i)
        elif char == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def _box_at(text: str, pairs: dict[int, int], start: int) -> tuple[int, int, int] | None:
    """(end, content_start, content_end) of the box command that starts at `start`, or None
    when it has no argument (a `{` that never closes: a truncated completion).

    `\\boxed 5` (no braces) reads one token; `\\framebox[w]{...}` skips the optional argument.
    """
    match = _BOX_COMMAND.match(text, start)
    if match is None:
        return None
    i = match.end()
    while i < len(text) and text[i] in " \t":
        i += 1
    spaced = i > match.end()
    option = _OPTIONAL_ARGUMENT.match(text, i)
    if option:
        i = option.end()
    if i >= len(text):
        return None
    if text[i] == "{":
        close = pairs.get(i)
        return None if close is None else (close + 1, i + 1, close)
    # A bare token only as "\\boxed 5"; "\\boxed\\boxed..." has no argument (no scan ahead).
    if not spaced or option:
        return None
    token = _BOX_TOKEN.match(text, i)
    return None if token is None else (token.end(), i, token.end())


def _box_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of the outermost boxes of `text`, in order; a box that only wraps
    another box (`\\boxed{\\boxed{5}}`) is unwrapped to the inner content. Linear time."""
    pairs = _brace_pairs(text)
    spans = []
    pos = 0
    for match in _BOX_COMMAND.finditer(text):
        if match.start() < pos:
            continue  # inside the previous outermost box
        box = _box_at(text, pairs, match.start())
        if box is None:
            continue
        pos, content_start, content_end = box
        while True:
            inner_start = _skip_spaces(text, content_start, content_end)
            inner = _box_at(text, pairs, inner_start)
            if inner is None or _skip_spaces_back(text, content_start, content_end) != inner[0]:
                break
            _, content_start, content_end = inner
        spans.append((match.start(), pos, text[content_start:content_end]))
    return spans


def find_boxed(text: str) -> list[str]:
    """Contents of the outermost boxes of `text`, in order (see `_box_spans`)."""
    return [content for _, _, content in _box_spans(text)]


def _display_spans(text: str) -> list[list[tuple[int, int]]]:
    """(start, end) of the `$$...$$` spans and of the `\\[...\\]` spans of `text`, in order
    (two lists, each of disjoint spans). Linear: a delimiter that never closes ends the scan
    for its kind (no later one can close either)."""
    kinds = []
    for left, right in (("$$", "$$"), ("\\[", "\\]")):
        spans = []
        pos = 0
        while (start := text.find(left, pos)) >= 0:
            end = text.find(right, start + len(left))
            if end < 0:
                break
            spans.append((start, end + len(right)))
            pos = end + len(right)
        kinds.append(spans)
    return kinds


def _containers(kinds: list[list[tuple[int, int]]], start: int, end: int) -> tuple[int, ...]:
    """For each kind of display span, the index of the span holding [start, end), else -1."""
    found = []
    for spans in kinds:
        i = bisect.bisect_right(spans, start, key=lambda span: span[0]) - 1
        found.append(i if i >= 0 and spans[i][0] <= start and end <= spans[i][1] else -1)
    return tuple(found)


def box_group(text: str) -> list[str]:
    """Contents of the last box of `text` and of the boxes before it that belong to the same
    answer, in order, each content once; [] when `text` has no box.

    Two boxes belong together when only a connector (spacing, commas, "and", "or", `\\quad`,
    math delimiters) separates them, or when one display span (`$$...$$`, `\\[...\\]`) holds
    both, as math-verify reads them. `\\boxed{(1, 2)}, \\boxed{(2, 1)}` gives both pairs;
    `\\boxed{3} so the total is \\boxed{5}` only "5".
    """
    return _box_group(text)[0]


def _box_group(text: str) -> tuple[list[str], int]:
    """(`box_group`'s contents, the end of the last box of `text`; 0 without a box)."""
    spans = _box_spans(text)
    if not spans:
        return [], 0
    displays = _display_spans(text)

    def together(left: tuple[int, int, str], right: tuple[int, int, str]) -> bool:
        if _BOX_JOIN.match(text, left[1], right[0]):
            return True
        shared = zip(
            _containers(displays, left[0], left[1]),
            _containers(displays, right[0], right[1]),
            strict=True,
        )
        return any(a >= 0 and a == b for a, b in shared)

    first = len(spans) - 1
    while first > 0 and together(spans[first - 1], spans[first]):
        first -= 1
    contents: list[str] = []
    for _, _, content in spans[first:]:
        if all(_squash_spaces(content) != _squash_spaces(seen) for seen in contents):
            contents.append(content)
    return contents, spans[-1][1]


def _squash_spaces(text: str) -> str:
    return "".join(text.split())


def _skip_spaces(text: str, start: int, end: int) -> int:
    while start < end and text[start].isspace():
        start += 1
    return start


def _skip_spaces_back(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def last_boxed(text: str) -> str | None:
    """Content of the last outermost box of `text`, or None when it has none."""
    boxes = find_boxed(text)
    return boxes[-1] if boxes else None


def has_latex(text: str) -> bool:
    """Whether `text` holds LaTeX math: a closed `$...$` span, a `\\(` or `\\[` delimiter, or a
    command other than a box, `\\text{}`, `\\$` and `\\%` (a lone "$5" is currency)."""
    return _LATEX_MATH.search(text) is not None


def _is_prose(answer: str) -> bool:
    """Whether an answer read after "the answer is" is a sentence ("The largest $n$ is 34")
    rather than a value ("18", "x = 2", "\\text{Bob wins}", "odd")."""
    bare = _LATEX_COMMAND.sub(" ", _TEXT_BLOCK.sub(" ", answer))
    return _PROSE.search(bare) is not None


def answer_region(completion: str) -> tuple[str, bool]:
    """(region, is_answer_block): the text an answer is read from.

    The content of the last `<answer>` block when there is one (an unclosed last `<answer>`
    reads to the end), else the whole completion; reasoning removed in both cases.
    """
    text = strip_reasoning(completion)
    opening = text.rfind("<answer>")
    if opening < 0:
        return text, False
    start = opening + len("<answer>")
    closing = text.find("</answer>", start)
    return (text[start:] if closing < 0 else text[start:closing]), True


def _find_closing(text: str, right: str, start: int) -> int:
    """Index of the first `right` at or after `start` that is not escaped (`\\$` is a dollar
    sign, not a delimiter); -1 if none."""
    while (found := text.find(right, start)) >= 0:
        if found == 0 or text[found - 1] != "\\" or right.startswith("\\"):
            return found
        start = found + 1
    return -1


def _strip_math_delimiters(text: str) -> str:
    for left, right in _MATH_DELIMITERS:
        # "$5$ and $6$" is two spans, not one wrapped in dollars.
        if (
            text.startswith(left)
            and len(text) >= len(left + right)
            and _find_closing(text, right, len(left)) == len(text) - len(right)
        ):
            return text[len(left) : len(text) - len(right)].strip()
    return text


def clean_answer(answer: str) -> str | None:
    """An extracted answer tidied for comparison, or None when nothing is left.

    Strips whitespace, math delimiters (`$`, `$$`, `\\(`, `\\[`), trailing sentence
    punctuation, a leading currency sign, thousands separators of a plain number ("7,425,000",
    "1 000"), and the plain words after a number ("18 dollars" -> "18").
    """
    text = answer.strip()
    for _ in range(3):
        previous = text
        text = _strip_math_delimiters(text).rstrip(" .,;:").strip()
        if text == previous:
            break
    if text.count("$") == 1:
        text = _CURRENCY.sub("", text)
    words = _NUMBER_THEN_WORDS.match(text)
    if words and not set(words.group(2).lower().split()) & _KEEP_WORDS:
        text = words.group(1)
    if _THOUSANDS.match(text):
        text = text.replace(",", "").replace(" ", "")
    return text or None


def _phrase_value(rest: str) -> str:
    """The answer in the text after "the answer is": a leading math span, else the sentence."""
    rest = rest.strip()
    for left, right in _MATH_DELIMITERS:
        if rest.startswith(left):
            close = _find_closing(rest, right, len(left))
            if close > 0:
                return rest[len(left) : close]
    end = _SENTENCE_END.search(rest)
    return rest[: end.start()] if end else rest


def _phrase_answer(text: str) -> str | None:
    matches = list(_ANSWER_PHRASE.finditer(text))
    if not matches:
        return None
    line_end = text.find("\n", matches[-1].end())
    rest = text[matches[-1].end() : line_end if line_end >= 0 else len(text)]
    return clean_answer(_phrase_value(rest))


def _final_answer(text: str) -> str | None:
    """The value of a "Final Answer: the final answer is X" in `text` when X is a math span or
    a number (the Minerva format that restates, after the last box, the answer it settles on);
    None otherwise."""
    if _FINAL_ANSWER.search(text) is None:
        return None
    matches = list(_ANSWER_PHRASE.finditer(text))
    if not matches or _VALUE_START.match(text, matches[-1].end()) is None:
        return None
    return _phrase_answer(text)


def _hash_answer(text: str) -> str | None:
    matches = _HASH_ANSWER.findall(text)
    return clean_answer(matches[-1]) if matches else None


@dataclass(frozen=True)
class Reading:
    """What the rules of this module read from one completion (module docstring, rules 1-6).

    answer: the answer of rules 3-4 (cleaned), None when they find none.
    region: the text the answer is looked for in (rule 2): where math-verify's extraction
        looks next when `answer` is None; None when nothing may be looked for (an answer
        block whose box never closes: a truncated completion).
    fallback: the answer of rule 6 (a prose value, else the last number of a region without
        LaTeX), for when math-verify's extraction finds nothing either; None if there is none.
    """

    answer: str | None
    region: str | None
    fallback: str | None


def read_answer(completion: str) -> Reading:
    """The rule-based reading of `completion` (module docstring); no math-verify."""
    region, in_block = answer_region(completion)
    group, last_box_end = _box_group(region)
    contents = [c for c in map(clean_answer, group) if c is not None]
    if contents:
        final = _final_answer(region[last_box_end:])
        return Reading(final or ", ".join(contents), region, None)
    if in_block:
        found = _phrase_answer(region) or _hash_answer(region)
        if found is None:
            # A block whose box never closes (truncated) has no answer rather than "\\boxed{12".
            if _BOX_COMMAND.search(region) is not None:
                return Reading(None, None, None)
            found = clean_answer(region)
    else:
        found = _hash_answer(region) or _phrase_answer(region)
    if found is not None and not _is_prose(found):
        return Reading(found, region, None)
    if found is None and not in_block and not has_latex(region):
        numbers = _NUMBER.findall(region)
        found = clean_answer(numbers[-1]) if numbers else None
    return Reading(None, region, found)


def extract_answer(completion: str) -> str | None:
    """The final answer of `completion` as a string (LaTeX or plain), or None if it gives none:
    `read_answer`'s answer, else its fallback (no math-verify: the cheap reading).

    The result is cleaned by `clean_answer` (no `$`, no trailing period, no thousands
    separators in plain numbers).
    """
    reading = read_answer(completion)
    return reading.answer if reading.answer is not None else reading.fallback


def choice_letter(text: str) -> str | None:
    """The option letter A-E that `text` names on its own ("C", "(C)", "C)", "C. 42",
    "\\text{(C)}", "(C) 42"), or None."""
    text = unwrap_text(text).replace("$", "").strip()
    match = _CHOICE_FORM.match(text)
    return match.group(1) if match else None


def gold_choice(gold: str) -> str | None:
    """The letter of a multiple-choice gold answer ("C", "(C)", "\\text{(C)}"), else None."""
    text = unwrap_text(gold).replace("$", "").replace(" ", "")
    match = _CHOICE_GOLD.match(text)
    return match.group(1) if match else None


def extract_choice(completion: str) -> str | None:
    """The option letter (A-E) a multiple-choice completion picks, or None.

    Read from the answer region (see `answer_region`): the last box (`\\boxed{C}`,
    `\\boxed{(C) 42}`), else the last "the answer is (C)" / "option C" / "choice: C", else the
    last `#### C`, else a whole answer block or a last line that is only a letter form ("C",
    "(C)", "C) 42").
    """
    region, in_block = answer_region(completion)
    boxed = last_boxed(region)
    if boxed is not None and (letter := choice_letter(boxed)) is not None:
        return letter
    phrases = _CHOICE_PHRASE.findall(region)
    if phrases:
        return phrases[-1]
    hashed = _HASH_ANSWER.findall(region)
    if hashed and (letter := choice_letter(hashed[-1])) is not None:
        return letter
    if in_block:
        return choice_letter(region)
    lines = [line for line in region.strip().splitlines() if line.strip()]
    return choice_letter(lines[-1]) if lines else None
