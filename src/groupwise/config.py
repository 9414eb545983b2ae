"""Typed configuration: YAML <-> dataclasses, `a.b=value` overrides, strict types, documented YAML.

The generic part of every configuration in groupwise (train's `Config`, sft's `SFTSettings`,
the benches' settings): a mapping read from YAML (`read_yaml`) and changed by `a.b=value`
overrides (`apply_override`) becomes a dataclass (`build`), each value checked against its
annotated type (`coerce`: bool, int, float, str, Literal choices, lists, mappings, optional
values, nested dataclasses); an unknown key or a wrong type is a ConfigError naming the key and
what is valid (for an unknown key and a value outside a Literal's choices, the closest valid one
first: `closest`). `documented_yaml` writes a
config back as YAML with each option's documentation as a comment (the docstring under its
declaration, or its field metadata "doc"). Range and cross-field checks belong to each
configuration (e.g. train's train.config_checks).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml


class ConfigError(ValueError):
    """A configuration file or override that cannot be used; the message names the key."""


# ---------------------------------------------------------------------------------------------
# Reading: YAML file and overrides -> mapping


def read_yaml(path: str | Path, what: str = "options") -> dict[str, Any]:
    """The mapping a YAML file holds ({} for an empty file); a missing file, a file that is not
    UTF-8 (with its line), not YAML or not a mapping (of `what`) is a one-line ConfigError
    naming it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ConfigError(
            f"{path} line {line}: not UTF-8 (byte 0x{raw[err.start]:02x}); save the file as UTF-8"
        ) from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as err:
        reason = " ".join(str(err).split())  # YAML errors span lines; ours are one line
        raise ConfigError(f"{path}: not valid YAML: {reason}") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(
            f"{path}: expected a mapping of {what}, got a {type(loaded).__name__}: {loaded!r}"
        )
    return loaded or {}


def apply_override(data: dict[str, Any], override: str) -> None:
    """Applies one `a.b=value` override in place; value is parsed as YAML (1e-6, true, [1, 2])."""
    if "=" not in override:
        raise ConfigError(f"override {override!r} must look like key.sub=value")
    dotted, raw = override.split("=", 1)
    parts = dotted.strip().split(".")
    if any(not p for p in parts):
        raise ConfigError(f"override {override!r}: empty key component")
    node = data
    for part in parts[:-1]:
        if node.get(part) is None:  # absent, or an empty section (`train:` in the YAML)
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"override {override!r}: '{part}' is not a section (it is {node!r})")
    try:
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        reason = " ".join(str(err).split())
        raise ConfigError(f"override {override!r}: cannot parse value: {reason}") from None


# ---------------------------------------------------------------------------------------------
# Building: mapping -> dataclass, with type checks


def build(cls: type, data: dict[str, Any] | None, prefix: str = "") -> Any:
    """An instance of dataclass `cls` from `data` (keys: its fields; a field that is itself a
    dataclass takes a nested mapping). prefix: the dotted path of `data`, for messages."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        where = prefix.rstrip(".") or "config"
        raise ConfigError(f"{where}: expected a mapping of options, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if key not in names:
            close = closest(key, names)
            guess = f" (did you mean '{prefix}{close}'?)" if close is not None else ""
            # repr: a key may hold any character (a newline would break the one-line message)
            raise ConfigError(f"unknown key {full!r}{guess}; valid keys here: {', '.join(names)}")
        kwargs[key] = coerce(value, hints[key], full)
    return cls(**kwargs)


def closest(value: Any, choices: Iterable[Any]) -> str | None:
    """The text of the choice closest to `value` by difflib's similarity of their texts (at
    least 0.6, difflib's default cut-off), or None when no choice is that close."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return close[0] if close else None


def coerce(value: Any, tp: Any, key: str) -> Any:
    """`value` checked against type `tp` (gently converted: int -> float, "1e-6" -> float);
    a ConfigError naming `key` and what it expected otherwise."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, f"{key}.")  # an empty section (`train:`) is None
    if origin is Literal:
        if value not in get_args(tp):
            valid = ", ".join(str(c) for c in get_args(tp))
            close = closest(value, get_args(tp))
            guess = f" (did you mean '{close}'?)" if close is not None else ""
            raise ConfigError(f"{key}: invalid value {value!r}{guess}; valid choices: {valid}")
        return value
    if origin in (Union, types.UnionType):
        return _coerce_union(value, get_args(tp), key)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        item = get_args(tp)[0]
        items = [coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        key_tp, value_tp = get_args(tp)
        return {
            coerce(k, key_tp, f"{key}.{k}"): coerce(v, value_tp, f"{key}.{k}")
            for k, v in value.items()
        }
    return _coerce_scalar(value, tp, key)


def _coerce_union(value: Any, members: tuple[Any, ...], key: str) -> Any:
    if value is None and type(None) in members:
        return None
    errors = []
    for member in members:
        if member is type(None):
            continue
        try:
            return coerce(value, member, key)
        except ConfigError as err:
            errors.append(str(err))
    if len(errors) == 1:
        raise ConfigError(errors[0])
    raise ConfigError(f"{key}: {value!r} fits none of {' | '.join(map(_type_name, members))}")


def _coerce_scalar(value: Any, tp: Any, key: str) -> Any:
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 reads 1e-6 (no dot) as a string; people write learning rates that way.
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported option type {_type_name(tp)}")


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))


# ---------------------------------------------------------------------------------------------
# Writing: dataclass -> documented YAML


def field_docs(cls: type) -> dict[str, str]:
    """{field: its documentation} of a config dataclass: the field's metadata "doc" (`option`),
    with its valid range (metadata "valid")."""
    docs = {}
    for spec in dataclasses.fields(cls):
        if spec.metadata.get("doc"):
            valid = spec.metadata.get("valid")
            docs[spec.name] = spec.metadata["doc"] + (f" Valid: {valid}." if valid else "")
    return docs


def documented_yaml(config: Any) -> str:
    """A config of sections (a dataclass of dataclasses) as YAML, every option preceded by its
    documentation as a comment; loadable again (what `groupwise train --print-config` prints)."""
    lines = []
    for section in dataclasses.fields(config):
        lines.append(f"{section.name}:")
        part = getattr(config, section.name)
        docs = field_docs(type(part))
        for option in dataclasses.fields(part):
            lines += [f"  # {line}" for line in _wrap(docs.get(option.name, ""), 94)]
            value = yaml.safe_dump(
                {option.name: getattr(part, option.name)}, default_flow_style=True, width=1000
            ).strip()
            lines.append(f"  {value[1:-1] if value.startswith('{') else value}")
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line else lines
