"""How every configuration of groupwise declares its options (train, eval, sft, the algorithm
options TRL and verl share): `option`, a dataclass field with its default, documentation and
valid range in one place, and `check_options`, which applies the ranges (docs/design.md,
"Choices already made").

It imports nothing of groupwise and not torch: the algorithms declare their options with it,
and the commands read it before anything heavy loads (a bad flag fails fast).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, Literal

__all__ = ["check_options", "literal_choices", "option"]

_NO_DEFAULT: Any = dataclasses.MISSING


def option(
    default: Any = _NO_DEFAULT,
    doc: str = "",
    valid: str | None = None,
    check: Callable[[Any], bool] | None = None,
    *,
    factory: Callable[[], Any] | None = None,
    cli: Mapping[str, Any] | None = None,
) -> Any:
    """A dataclass field with its documentation and, where a type alone does not say it, its
    valid range in words (`valid`) and as a predicate (`check`, applied by `check_options`).
    factory: for a mutable default (a list, a mapping), in place of `default`. cli: how a
    command line that generates its flags from the fields shows it (groupwise eval: "flag",
    "type", "choices", "default", "group", "metavar"; the flag is --NAME-WITH-DASHES unless
    given)."""
    metadata = {"doc": " ".join(doc.split()), "valid": valid, "check": check, "cli": cli or {}}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


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
