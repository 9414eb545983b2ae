"""How every configuration of groupwise declares its options (train, eval, sft, the algorithm
options TRL and verl share): `option`, a dataclass field with its default, documentation and
valid range in one place, and `check_options`, which applies the ranges (docs/design.md,
"Choices already made").

A range is declared once, as bounds (`ge`, `gt`, `le`, `lt`), `choices`, `integer` and
`allow_none`; the words --print-config and error messages show ("in (0, 1]", "an integer >= 1")
and the check are both made from it (`Rule`). Only where a range cannot say it does a field
give its own `Rule`: words and predicate, side by side.

It imports nothing of groupwise and not torch: the algorithms declare their options with it,
and the commands read it before anything heavy loads (a bad flag fails fast).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Rule", "check_options", "literal_choices", "option"]

_NO_DEFAULT: Any = dataclasses.MISSING


@dataclass(frozen=True)
class Rule:
    """The values an option takes: `words`, what follows "must be" in an error and "Valid:" in
    the documentation, and `test`, the predicate that decides."""

    words: str
    test: Callable[[Any], bool]


def option(
    default: Any = _NO_DEFAULT,
    doc: str = "",
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    integer: bool = False,
    choices: Collection[Any] | None = None,
    allow_none: bool = False,
    note: str = "",
    rule: Rule | None = None,
    factory: Callable[[], Any] | None = None,
    cli: Mapping[str, Any] | None = None,
) -> Any:
    """A dataclass field with its documentation and, where a type alone does not say it, its
    valid range, applied by `check_options`.

    ge, gt, le, lt: bounds (>=, >, <=, <) of a number (a bool is no number). integer: an int,
    not a float (for values no typed config has coerced). choices: the values allowed.
    allow_none: None is valid too. note: words after the range, e.g. "(0: off)". rule: a range
    no bound or choice can say, in place of them. factory: for a mutable default (a list, a
    mapping), in place of `default`. cli: how a command line that generates its flags from the
    fields shows it (groupwise eval: "flag", "type", "choices", "default", "group", "metavar";
    the flag is --NAME-WITH-DASHES unless given)."""
    declared = _range_rule(ge, gt, le, lt, integer, choices, allow_none, note)
    if rule is not None and declared is not None:
        raise TypeError("option: give a rule or a range (bounds, choices), not both")
    valid = rule or declared
    metadata = {
        "doc": " ".join(doc.split()),
        "valid": valid.words if valid else None,
        "check": valid.test if valid else None,
        "cli": cli or {},
    }
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _range_rule(
    ge: float | None,
    gt: float | None,
    le: float | None,
    lt: float | None,
    integer: bool,
    choices: Collection[Any] | None,
    allow_none: bool,
    note: str,
) -> Rule | None:
    """The Rule of a declared range; None when none is declared."""
    low, high = _bound(ge, gt, "lower"), _bound(le, lt, "upper")
    if choices is not None:
        if low or high or integer:
            raise TypeError("option: choices take no bounds")
        words, test = f"one of {', '.join(str(c) for c in choices)}", choices.__contains__
    elif low or high or integer:
        words, test = _bounds_words(low, high, integer), _bounds_test(low, high, integer)
    else:
        return None
    words = f"{words} {note}" if note else words
    return Rule(words, (lambda v: v is None or test(v)) if allow_none else test)


def _bound(inclusive: float | None, strict: float | None, side: str) -> tuple[float, bool] | None:
    """(value, inclusive) of one side's bound, None when that side is open."""
    if inclusive is not None and strict is not None:
        raise TypeError(f"option: two {side} bounds")
    if inclusive is not None:
        return inclusive, True
    return None if strict is None else (strict, False)


def _bounds_words(
    low: tuple[float, bool] | None, high: tuple[float, bool] | None, integer: bool
) -> str:
    if low and high:
        words = f"in {'[' if low[1] else '('}{low[0]}, {high[0]}{']' if high[1] else ')'}"
    elif low:
        words = f"{'>=' if low[1] else '>'} {low[0]}"
    elif high:
        words = f"{'<=' if high[1] else '<'} {high[0]}"
    else:
        words = ""
    return f"an integer {words}".rstrip() if integer else words


def _bounds_test(
    low: tuple[float, bool] | None, high: tuple[float, bool] | None, integer: bool
) -> Callable[[Any], bool]:
    def test(value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
            return False
        above = low is None or (value >= low[0] if low[1] else value > low[0])
        return above and (high is None or (value <= high[0] if high[1] else value < high[0]))

    return test


def check_options(values: Any, name: Callable[[str], str] = str) -> None:
    """Raise ValueError naming the first field of the dataclass `values` outside its Literal
    choices or its `option` range; `name` maps a field to the name the user typed (e.g.
    "algorithm.margin", "amir_margin")."""
    hints = typing.get_type_hints(type(values))
    for spec in dataclasses.fields(values):
        value = getattr(values, spec.name)
        choices = literal_choices(hints[spec.name])
        if choices and value not in choices:
            listed = ", ".join(str(c) for c in choices)
            raise ValueError(f"{name(spec.name)}={value!r} is not one of {listed}")
        ok = spec.metadata.get("check")
        if ok is not None and not ok(value):
            raise ValueError(f"{name(spec.name)} must be {spec.metadata['valid']}, got {value!r}")


def literal_choices(hint: Any) -> tuple[Any, ...]:
    """The values a Literal type allows; () for any other type."""
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else ()
