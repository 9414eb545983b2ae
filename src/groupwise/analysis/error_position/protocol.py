"""What the judge is asked about one incorrect solution (`judge_messages`) and how its reply is
read (`parse_judgement`): the first erroneous step k and its error type, as JSON
{"step": k, "type": "..."}."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groupwise.analysis.error_position.taxonomy import ErrorType, normalized_name

Message = dict[str, str]

JUDGE_SYSTEM = (
    "You are an expert mathematics grader. You locate the first step where a "
    "solution goes wrong and classify the error. You answer with JSON only."
)


def judge_messages(
    question: str, gold: str, steps: Sequence[str], taxonomy: Sequence[ErrorType]
) -> list[Message]:
    """The chat messages that ask a judge for the first erroneous step and its type."""
    numbered = "\n".join(f"Step {i}: {step}" for i, step in enumerate(steps, start=1))
    types = "\n".join(f'- "{t.name}": {t.description}' for t in taxonomy)
    user = (
        f"Problem:\n{question}\n\nReference answer: {gold}\n\n"
        "The solution below is INCORRECT (its final answer does not match the reference). "
        f"Its {len(steps)} steps are numbered.\n\n{numbered}\n\n"
        "Find the FIRST erroneous step: the earliest step at which the reasoning irreversibly "
        "departs from a valid solution. Classify that error with exactly one of these types:\n"
        f"{types}\n\n"
        'Answer with one JSON object and nothing else, e.g. {"step": 2, "type": "'
        f'{taxonomy[0].name}"}}. "step" is an integer from 1 to {len(steps)}; "type" is one '
        "of the type names above, spelled exactly."
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class Judgement:
    step: int
    type: str


class JudgeAnswerError(ValueError):
    """The judge's text is not a usable {"step": k, "type": ...} answer."""


_STEP_RE = re.compile(r"""["']?step["']?\s*[:=]\s*["']?(\d+)""", re.I)
_TYPE_RE = re.compile(r"""["']?(?:error_)?type["']?\s*[:=]\s*["']([^"'\n]+)["']""", re.I)
_PROSE_STEP_RE = re.compile(r"\bstep\s*(?:#|no\.?|number)?\s*(\d+)", re.I)


def parse_judgement(text: str, num_steps: int, taxonomy: Sequence[ErrorType]) -> Judgement:
    """Read {"step": k, "type": "..."} out of a judge's reply.

    Tolerates text or code fences around the object, key case, "error_type" for "type", a step
    given as a string; as fallbacks, almost-JSON (e.g. single quotes: the two fields found by
    pattern), then prose that names exactly one step number ("step 3") and exactly one
    taxonomy type. The type must name a taxonomy entry (compared ignoring case, spaces, '_'
    and '-'); the step must lie in 1..num_steps. Raises JudgeAnswerError saying what is wrong.
    """
    names = {normalized_name(t.name): t.name for t in taxonomy}
    fields = _json_fields(text) or _pattern_fields(text) or _prose_fields(text, names)
    if fields is None:
        raise JudgeAnswerError(f"no step/type fields in the reply: {text[:120]!r}")
    raw_step, raw_type = fields
    try:
        step = int(raw_step) if not isinstance(raw_step, str) else int(raw_step.strip())
        if isinstance(raw_step, float) and raw_step != step:
            raise ValueError
    except (TypeError, ValueError) as err:
        raise JudgeAnswerError(f"step is not an integer: {raw_step!r}") from err
    if not 1 <= step <= num_steps:
        raise JudgeAnswerError(f"step {step} outside 1..{num_steps}")
    if not isinstance(raw_type, str) or normalized_name(raw_type) not in names:
        raise JudgeAnswerError(f"type {raw_type!r} is not in the taxonomy")
    return Judgement(step=step, type=names[normalized_name(raw_type)])


def _json_fields(text: str) -> tuple[Any, Any] | None:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            lowered = {str(k).lower(): v for k, v in obj.items()}
            kind = lowered.get("type", lowered.get("error_type"))
            if "step" in lowered and kind is not None:
                return lowered["step"], kind
    return None


def _pattern_fields(text: str) -> tuple[str, str] | None:
    step, kind = _STEP_RE.search(text), _TYPE_RE.search(text)
    return (step.group(1), kind.group(1)) if step and kind else None


def _prose_fields(text: str, names: Mapping[str, str]) -> tuple[str, str] | None:
    steps = set(_PROSE_STEP_RE.findall(text))
    flat = normalized_name(text)
    kinds = [name for key, name in names.items() if key in flat]
    return (steps.pop(), kinds[0]) if len(steps) == 1 and len(kinds) == 1 else None
