"""Prints pip constraints that pin every dependency groupwise declares to its floor.

Reads pyproject.toml (the dependencies, and the extras named on the command line) and turns
each `name>=X,...` into `name==X`, so that the floor environment (scripts/floor_env.sh) and the
floor rows of scripts/check_install.sh always test what the package declares. Then adds the
pins of packages groupwise does not depend on directly that the floors need (PINS below, each
with its reason). Needs Python >= 3.11 (tomllib).

Usage: python3 scripts/floor_constraints.py [EXTRA ...] > floors.txt   (e.g. EXTRA: dev trl)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

# pyarrow (datasets <- TRL) 26 raises "pyarrow requires NumPy 2.0 or newer" at import but does
# not declare it; at the numpy floor (1.26) the newest pyarrow that imports is 25.x.
PINS = ["pyarrow<26"]

FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*>=\s*([^,;\s]+)")


def floors(requirements: list[str]) -> list[str]:
    """`name==floor` for each requirement with a `>=` lower bound, in order."""
    pins = []
    for requirement in requirements:
        match = FLOOR.match(requirement)
        if match is None:
            sys.exit(f"{PYPROJECT}: no '>=' floor in dependency {requirement!r}")
        pins.append(f"{match.group(1)}=={match.group(2)}")
    return pins


def main(extras: list[str]) -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    requirements = list(project["dependencies"])
    for extra in extras:
        if extra not in optional:
            sys.exit(f"{PYPROJECT}: no extra named {extra!r} in [project.optional-dependencies]")
        requirements += optional[extra]
    print("\n".join(dict.fromkeys(floors(requirements) + PINS)))


if __name__ == "__main__":
    main(sys.argv[1:])
