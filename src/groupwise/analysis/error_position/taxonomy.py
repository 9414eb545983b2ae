"""The error taxonomy: the types a judge may name for the first erroneous step (YAML, default
the packaged `error_taxonomy.yaml`; docs/algorithms.md, "Analyses of AMIR-GRPO")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

DEFAULT_TAXONOMY = Path(__file__).with_name("error_taxonomy.yaml")


@dataclass(frozen=True)
class ErrorType:
    name: str
    description: str


def normalized_name(name: str) -> str:
    """A type name as names are compared: lower case, runs of spaces, '_' and '-' one space."""
    return re.sub(r"[\s_\-]+", " ", name.strip().lower())


def load_taxonomy(path: str | Path = DEFAULT_TAXONOMY) -> list[ErrorType]:
    """The error types of a taxonomy YAML file: `types: [{name, description}, ...]`."""
    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("types"), list) or not data["types"]:
        raise ValueError(
            f"{path}: expected a mapping with a non-empty list `types` of {{name, description}}"
        )
    types: list[ErrorType] = []
    seen: set[str] = set()
    for i, entry in enumerate(data["types"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError(f"{path}: types[{i}] needs a string `name` (and a `description`)")
        name = entry["name"].strip()
        if normalized_name(name) in seen:
            raise ValueError(f"{path}: types[{i}]: duplicate name {name!r}")
        unknown = set(entry) - {"name", "description"}
        if unknown:
            raise ValueError(
                f"{path}: types[{i}]: unknown key(s) {sorted(unknown)} (valid: name, description)"
            )
        seen.add(normalized_name(name))
        types.append(ErrorType(name=name, description=str(entry.get("description", "")).strip()))
    return types
