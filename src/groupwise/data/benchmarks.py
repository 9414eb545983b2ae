"""The benchmark registry and `Problem`, one question with its gold answer.

`load_benchmark(name, split=None, data_dir=None, **options)` calls the loader registered as
`name` (`register_benchmark`; the built-in ones are groupwise.data.loaders, the synthetic
`arith` task groupwise.data.synthetic) with the data folder: `data_dir`, else the folder in env
`GROUPWISE_DATA`, else a `../shared/data` folder (`resolve_data_dir`), else None, the public hub
copies. `BenchmarkSpec` is a benchmark as a command line names it.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BenchmarkFormatError",
    "BenchmarkSpec",
    "Problem",
    "benchmark_names",
    "benchmark_splits",
    "difficulty_level",
    "load_benchmark",
    "register_benchmark",
    "resolve_data_dir",
]

DATA_ENV = "GROUPWISE_DATA"
HUB = "hub"  # GROUPWISE_DATA=hub: the public hub copies, never a local folder


@dataclass(frozen=True)
class Problem:
    """One question with its gold answer.

    id: unique within its benchmark, prefixed with the benchmark name. answer: the gold final
    answer as a string (LaTeX allowed, no `$`). choices: option texts of a multiple-choice
    question, in letter order A, B, ... (the gold is then the letter); None otherwise.
    meta: other native fields worth keeping (solution, level, subject, unit, ...).
    """

    id: str
    question: str
    answer: str
    choices: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class BenchmarkFormatError(ValueError):
    """A benchmark record that cannot be mapped to a Problem; the message names file and line."""


Loader = Callable[..., list[Problem]]


@dataclass(frozen=True)
class _Benchmark:
    loader: Loader
    splits: tuple[str, ...]
    default_split: str


_REGISTRY: dict[str, _Benchmark] = {}


def register_benchmark(
    name: str, splits: tuple[str, ...] | list[str] = ("test",), default_split: str | None = None
) -> Callable[[Loader], Loader]:
    """Decorator registering `loader(data_dir: Path | None, split: str, **options)` as `name`.

    The loader is called with keyword arguments. default_split: the split used when
    `load_benchmark` gets none ("test" if it is one of `splits`, else the first).
    """
    splits = tuple(splits)
    if not splits:
        raise ValueError(f"register_benchmark({name!r}): splits is empty")
    default = default_split or ("test" if "test" in splits else splits[0])
    if default not in splits:
        raise ValueError(
            f"register_benchmark({name!r}): default_split {default!r} is not one of {splits}"
        )

    def decorator(loader: Loader) -> Loader:
        if name in _REGISTRY:
            raise ValueError(f"benchmark {name!r} is already registered")
        _REGISTRY[name] = _Benchmark(loader, splits, default)
        return loader

    return decorator


def benchmark_names() -> list[str]:
    """Registered benchmark names, sorted."""
    return sorted(_REGISTRY)


def _benchmark(name: str) -> _Benchmark:
    if name not in _REGISTRY:
        raise ValueError(f"unknown benchmark {name!r}; valid benchmarks: {benchmark_names()}")
    return _REGISTRY[name]


def benchmark_splits(name: str) -> tuple[str, ...]:
    """The splits of benchmark `name`, the default one first."""
    spec = _benchmark(name)
    return (spec.default_split, *(s for s in spec.splits if s != spec.default_split))


def resolve_data_dir(data_dir: str | Path | None) -> Path | None:
    """The benchmark folder: `data_dir`, else env GROUPWISE_DATA, else the first `shared/data`
    folder of DATA_BESIDE that exists, else None (meaning: the public hub copies; also what
    GROUPWISE_DATA=hub asks for). The same default for `groupwise train`, `groupwise eval` and
    the TRL example (docs/guides/train.md, "Training data")."""
    chosen = data_dir if data_dir is not None else os.environ.get(DATA_ENV) or None
    if chosen is None:
        return next((folder for folder in data_beside() if folder.is_dir()), None)
    return None if str(chosen) == HUB else Path(chosen).expanduser()


def data_beside() -> list[Path]:
    """Where a data folder is looked for when none is named: ../shared/data from the working
    folder (a checkout beside the shared data), then the one beside groupwise's own checkout
    (an editable install run from elsewhere)."""
    checkout = Path(__file__).resolve().parents[3]
    return [Path.cwd().parent / "shared" / "data", checkout.parent / "shared" / "data"]


_LEVEL = re.compile(r"^Level ([1-9])$")


def difficulty_level(problem: Problem) -> int | None:
    """The MATH difficulty level (1-5) of a problem whose record carries one: meta["level"]
    is "Level 5" in MATH and 5 in MATH-500; None for any other problem ("Level ?" in two MATH
    train records, the synthetic task's "mid")."""
    level = problem.meta.get("level")
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    match = _LEVEL.match(level) if isinstance(level, str) else None
    return int(match.group(1)) if match else None


def _check_split(name: str, split: str) -> None:
    spec = _benchmark(name)
    if split not in spec.splits:
        raise ValueError(
            f"benchmark {name!r} has no split {split!r}; valid splits: {list(spec.splits)}"
        )


def load_benchmark(
    name: str, split: str | None = None, data_dir: str | Path | None = None, **options: Any
) -> list[Problem]:
    """The problems of benchmark `name`, split `split` (None: the benchmark's default split,
    "test" for all but livemathbench, whose default is "AMC_en").

    data_dir: a folder laid out like the shared data folder; default env GROUPWISE_DATA, else
    the public hub copies (needs `datasets`). options: passed to the loader (e.g. level/size of
    the synthetic "arith" task). Unknown names and splits raise naming the valid ones.
    """
    spec = _benchmark(name)
    split = spec.default_split if split is None else split
    _check_split(name, split)
    return spec.loader(data_dir=resolve_data_dir(data_dir), split=split, **options)


def benchmark_options(name: str) -> tuple[str, ...] | None:
    """The keyword options benchmark `name`'s loader takes besides data_dir and split; None
    when it takes any (**options)."""
    parameters = inspect.signature(_benchmark(name).loader).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return tuple(p.name for p in parameters if p.name not in ("data_dir", "split"))


def _option_value(text: str) -> Any:
    """A command-line option value: an int, a float, true/false, else the text itself."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


@dataclass(frozen=True)
class BenchmarkSpec:
    """A benchmark as named on a command line: NAME[:SPLIT][@KEY=VALUE]... e.g. `gsm8k`,
    `livemathbench:hard_en`, `aqua@format=official`, `arith:test@level=hard@size=200`.

    split None means the benchmark's default split; options go to its loader (values parsed as
    int, float or true/false when they read as one). `parse` checks name, split and option
    names against the registry, so a bad spec fails before anything is loaded.
    """

    name: str
    split: str | None = None
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, text: str) -> BenchmarkSpec:
        head, *pairs = text.strip().split("@")
        name, _, split = head.partition(":")
        options = []
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"benchmark {text!r}: option {pair!r} is not KEY=VALUE")
            options.append((key, _option_value(value)))
        spec = cls(name, split or None, tuple(options))
        _benchmark(name)
        if spec.split is not None:
            _check_split(name, spec.split)
        valid = benchmark_options(name)
        unknown = [k for k, _ in options if valid is not None and k not in valid]
        if unknown:
            raise ValueError(
                f"benchmark {name!r} has no option {unknown[0]!r}; valid options: {list(valid)}"
                if valid
                else f"benchmark {name!r} takes no options, got {unknown[0]!r}"
            )
        return spec

    def load(self, data_dir: str | Path | None = None) -> list[Problem]:
        """`load_benchmark` with this spec's name, split and options."""
        return load_benchmark(self.name, self.split, data_dir, **dict(self.options))
