"""A training-data mix: one problem list built from several benchmark parts.

Each part names a benchmark (split, loader options) and how much of it to take: all of it, a
`size`, or a `fraction`, drawn at random with the part's own `seed`, so the mix depends on
nothing but its parts. The LENS paper's training data (docs/algorithms.md §3), MATH train + a random
17,500 of DAPO-Math-17k, is

    [MixPart("math", "train"), MixPart("dapo_math_17k", "train", size=17_500, seed=0)]

or, in a config file, a list of mappings with the same keys (`MixPart.from_dict`):

    mix:
      - {benchmark: math, split: train}
      - {benchmark: dapo_math_17k, split: train, size: 17500, seed: 0}
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from groupwise.data.benchmarks import Problem, load_benchmark

__all__ = ["MixPart", "load_mix", "mix_problems", "select_part"]


@dataclass(frozen=True)
class MixPart:
    """One part of a mix.

    benchmark, split (None: the benchmark's default split), options: what to load
    (groupwise.data.load_benchmark). size: how many problems to draw, or fraction in (0, 1]:
    fraction x the benchmark's problems, rounded half up; neither: all of them. seed: the seed
    of the draw.
    """

    benchmark: str
    split: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    size: int | None = None
    fraction: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        where = self.label
        if self.size is not None and self.fraction is not None:
            raise ValueError(f"{where}: give size or fraction, not both")
        if self.size is not None and (
            isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1
        ):
            raise ValueError(f"{where}: size must be an integer >= 1, got {self.size!r}")
        if self.fraction is not None and not (
            isinstance(self.fraction, (int, float))
            and not isinstance(self.fraction, bool)
            and 0 < self.fraction <= 1
        ):
            raise ValueError(f"{where}: fraction must be in (0, 1], got {self.fraction!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{where}: seed must be an integer >= 0, got {self.seed!r}")
        if not isinstance(self.options, Mapping):
            raise ValueError(f"{where}: options must be a mapping, got {self.options!r}")

    @property
    def label(self) -> str:
        """BENCHMARK[:SPLIT], as error messages name the part."""
        return self.benchmark + (f":{self.split}" if self.split else "")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "mix part") -> MixPart:
        """A part from a config mapping with MixPart's keys; `where` names it in errors (e.g.
        "data.mix[1]")."""
        if not isinstance(data, Mapping):
            raise ValueError(
                f"{where}: expected a mapping with keys benchmark, split, options, "
                f"size or fraction, seed; got {data!r}"
            )
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; valid keys: {valid}")
        if "benchmark" not in data:
            raise ValueError(f"{where}: missing key 'benchmark'")
        try:
            return cls(**data)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None


def select_part(
    part: MixPart, problems: Sequence[Problem], where: str | None = None
) -> list[Problem]:
    """The problems `part` takes from its benchmark's `problems`: all, or a random `size` /
    `fraction` of them drawn with `part.seed`, kept in their original order. Pure: the same
    part and problems always give the same list. `where` names the part in errors."""
    if part.size is None and part.fraction is None:
        return list(problems)
    where = where or part.label
    available = len(problems)
    if part.size is not None:
        count = part.size
        if count > available:
            raise ValueError(f"{where}: size {count} > {available} problems in {part.label}")
    else:
        count = int(part.fraction * available + 0.5)  # nearest, halves up
        if count < 1:
            raise ValueError(
                f"{where}: fraction {part.fraction} of {available} problems in "
                f"{part.label} selects none"
            )
    chosen = sorted(random.Random(part.seed).sample(range(available), count))
    return [problems[i] for i in chosen]


def mix_problems(parts: Sequence[tuple[MixPart, Sequence[Problem]]]) -> list[Problem]:
    """One problem list from (part, its benchmark's problems) pairs: each part's selection,
    in the order of the parts. Pure. A problem id taken by two parts is an error naming both."""
    if not parts:
        raise ValueError("a data mix needs at least one part")
    taken: dict[str, int] = {}
    out: list[Problem] = []
    for number, (part, problems) in enumerate(parts):
        for problem in select_part(part, problems, f"mix part {number} ({part.label})"):
            if problem.id in taken:
                first = parts[taken[problem.id]][0]
                raise ValueError(
                    f"mix part {number} ({part.label}) takes {problem.id}, which "
                    f"part {taken[problem.id]} ({first.label}) takes too"
                )
            taken[problem.id] = number
            out.append(problem)
    return out


def load_mix(parts: Sequence[MixPart], data_dir: str | Path | None = None) -> list[Problem]:
    """Load each part's benchmark (data_dir as groupwise.data.load_benchmark) and mix them
    (`mix_problems`); an error while loading names the part."""
    loaded = []
    for number, part in enumerate(parts):
        try:
            problems = load_benchmark(part.benchmark, part.split, data_dir, **dict(part.options))
        except (ValueError, FileNotFoundError, ImportError) as err:
            raise type(err)(f"mix part {number} ({part.label}): {err}") from err
        loaded.append((part, problems))
    return mix_problems(loaded)
