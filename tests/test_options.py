"""groupwise.options: a range declared once (bounds, choices, None allowed) gives both the words
that --print-config and errors show and the check; a `Rule` carries words and check together
where no range can say it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pytest

from groupwise.config import field_docs
from groupwise.options import Rule, check_options, option


@dataclass
class Declared:
    at_least_one: int = option(1, "Count.", ge=1)
    positive: float = option(1.0, "Rate.", gt=0)
    share: float = option(0.5, "Share.", gt=0, le=1)
    fraction: float = option(0.0, "Fraction.", ge=0, lt=1)
    open_unit: float = option(0.5, "Open.", gt=0, lt=1)
    at_most: float = option(0.0, "Cap.", le=2)
    whole: int = option(0, "Seed.", integer=True, ge=0)
    limit: int | None = option(None, "Limit.", ge=1, allow_none=True, note="(or null: all)")
    seconds: float = option(5.0, "Timeout.", gt=0, note="seconds")
    dtype: str = option("float32", "Dtype.", choices=("float32", "bfloat16"))
    names: list[str] = option(
        doc="Names.",
        rule=Rule("a list of: a, b", lambda v: all(n in "ab" for n in v)),
        factory=list,
    )
    mode: Literal["x", "y"] = option("x", "Mode.")
    free: float = option(0.0, "Unchecked.")


# (field, value, None = accepted or the message check_options raises)
TABLE: list[tuple[str, Any, str | None]] = [
    ("at_least_one", 1, None),
    ("at_least_one", 7, None),
    ("at_least_one", 0, "at_least_one must be >= 1, got 0"),
    ("at_least_one", -3, "at_least_one must be >= 1, got -3"),
    ("at_least_one", True, "at_least_one must be >= 1, got True"),  # a bool is no number
    ("at_least_one", "2", "at_least_one must be >= 1, got '2'"),
    ("at_least_one", None, "at_least_one must be >= 1, got None"),
    ("positive", 1e-9, None),
    ("positive", 0.0, "positive must be > 0, got 0.0"),
    ("positive", float("nan"), "positive must be > 0, got nan"),
    ("share", 1.0, None),
    ("share", 0.0, "share must be in (0, 1], got 0.0"),
    ("share", 1.5, "share must be in (0, 1], got 1.5"),
    ("fraction", 0.0, None),
    ("fraction", 1.0, "fraction must be in [0, 1), got 1.0"),
    ("open_unit", 0.0, "open_unit must be in (0, 1), got 0.0"),
    ("open_unit", 1.0, "open_unit must be in (0, 1), got 1.0"),
    ("open_unit", 0.999, None),
    ("at_most", 2, None),
    ("at_most", -5.0, None),
    ("at_most", 2.5, "at_most must be <= 2, got 2.5"),
    ("whole", 0, None),
    ("whole", 3, None),
    ("whole", 1.0, "whole must be an integer >= 0, got 1.0"),
    ("whole", -1, "whole must be an integer >= 0, got -1"),
    ("limit", None, None),
    ("limit", 5, None),
    ("limit", 0, "limit must be >= 1 (or null: all), got 0"),
    ("seconds", 0.5, None),
    ("seconds", 0, "seconds must be > 0 seconds, got 0"),
    ("dtype", "bfloat16", None),
    ("dtype", "float8", "dtype must be one of float32, bfloat16, got 'float8'"),
    ("names", ["a", "b"], None),
    ("names", ["c"], "names must be a list of: a, b, got ['c']"),
    ("mode", "y", None),
    ("mode", "z", "mode='z' is not one of x, y"),
    ("free", -1e30, None),
]


@pytest.mark.parametrize(
    ("key", "value", "message"), TABLE, ids=[f"{k}={v!r}" for k, v, _ in TABLE]
)
def test_a_declared_range_accepts_and_refuses_with_its_words(
    key: str, value: Any, message: str | None
) -> None:
    declared = Declared(**{key: value})
    if message is None:
        check_options(declared)
        return
    with pytest.raises(ValueError) as caught:
        check_options(declared)
    assert str(caught.value) == message


def test_the_same_words_document_the_option() -> None:
    docs = field_docs(Declared)
    assert docs["at_least_one"] == "Count. Valid: >= 1."
    assert docs["share"] == "Share. Valid: in (0, 1]."
    assert docs["limit"] == "Limit. Valid: >= 1 (or null: all)."
    assert docs["whole"] == "Seed. Valid: an integer >= 0."
    assert docs["names"] == "Names. Valid: a list of: a, b."
    assert docs["free"] == "Unchecked."  # no range: no words


def test_check_options_names_the_key_the_user_typed() -> None:
    with pytest.raises(ValueError, match=r"^section\.share must be in \(0, 1\], got 2$"):
        check_options(Declared(share=2), lambda name: f"section.{name}")


@pytest.mark.parametrize(
    "declaration",
    [
        {"ge": 0, "gt": 0},  # two lower bounds
        {"le": 1, "lt": 1},  # two upper bounds
        {"choices": ("a",), "ge": 1},
        {"ge": 1, "rule": Rule("odd", lambda v: v % 2 == 1)},
    ],
)
def test_a_range_is_stated_one_way(declaration: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="option: "):
        option(1, "X.", **declaration)
