"""Evaluation runs as the analyses see them: a folder written by `groupwise eval` (its records,
see groupwise.records), named on the command line as NAME=EVAL_DIR or EVAL_DIR alone (then
named after its folder).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupwise.records import (
    CONFIG_FILE,
    PROBLEMS_FILE,
    SAMPLES_FILE,
    ProblemKey,
    Sample,
    SavedProblem,
    group_by_problem,
    read_json,
    read_problems,
    read_samples,
)


@dataclass
class EvalRun:
    """One evaluation run read from its folder: samples, problems (may be empty), config."""

    name: str
    path: Path
    samples: list[Sample]
    problems: dict[ProblemKey, SavedProblem] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def by_problem(self) -> dict[ProblemKey, list[Sample]]:
        return group_by_problem(self.samples)


def parse_run_specs(specs: Sequence[str]) -> dict[str, Path]:
    """Command-line runs as {name: folder}: NAME=EVAL_DIR, or EVAL_DIR named after its folder."""
    runs: dict[str, Path] = {}
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep:
            name, folder = Path(spec).name, spec
        if not name or not folder:
            raise ValueError(f"run {spec!r}: expected NAME=EVAL_DIR or EVAL_DIR")
        if name in runs:
            raise ValueError(
                f"run name {name!r} given twice ({runs[name]} and {folder}); "
                "name them with NAME=EVAL_DIR"
            )
        runs[name] = Path(folder)
    return runs


def load_run(name: str, path: str | Path, benchmarks: Sequence[str] | None = None) -> EvalRun:
    """Read an evaluation folder (or a samples.jsonl path); keep only `benchmarks` if given."""
    path = Path(path)
    folder = path.parent if path.is_file() else path
    samples_path = path if path.is_file() else folder / SAMPLES_FILE
    if not samples_path.is_file():
        raise FileNotFoundError(
            f"run {name!r}: no {SAMPLES_FILE} in {folder} "
            "(expected the --output folder of `groupwise eval`)"
        )
    samples = read_samples(samples_path)
    if benchmarks:
        present = sorted({s.benchmark for s in samples})
        missing = [b for b in benchmarks if b not in present]
        if missing:
            raise ValueError(
                f"run {name!r}: benchmark(s) {', '.join(missing)} not in "
                f"{samples_path} (present: {', '.join(present)})"
            )
        samples = [s for s in samples if s.benchmark in benchmarks]
    problems_path = folder / PROBLEMS_FILE
    problems = read_problems(problems_path) if problems_path.is_file() else {}
    config_path = folder / CONFIG_FILE
    config = read_json(config_path) if config_path.is_file() else {}
    return EvalRun(name=name, path=folder, samples=samples, problems=problems, config=config)


def load_runs(specs: Sequence[str], benchmarks: Sequence[str] | None = None) -> list[EvalRun]:
    """`load_run` for each NAME=EVAL_DIR spec, in the order given."""
    return [load_run(name, path, benchmarks) for name, path in parse_run_specs(specs).items()]


def warn_if_fewer_samples(runs: Sequence[EvalRun], analysis: str, protocol: int | None) -> None:
    """Warn, naming the folder, for every run whose problems have fewer samples than the
    paper's protocol for `analysis` (None: the paper states none). Fewer samples per problem
    change what the analysis measures: fewer problems look solvable, margins are noisier."""
    if protocol is None:
        return
    for run in runs:
        fewest = min((len(g) for g in run.by_problem().values()), default=0)
        if fewest < protocol:
            warnings.warn(
                f"analyze {analysis}: run {run.name!r} ({run.path}) has {fewest} "
                f"samples per problem; the paper's protocol uses {protocol} "
                "(groupwise eval --n)",
                stacklevel=2,
            )


def common_problems(runs: Sequence[EvalRun]) -> list[ProblemKey]:
    """Problems present in every run, in the first run's order; warns when runs differ."""
    keys = [list(run.by_problem()) for run in runs]
    shared = set(keys[0]).intersection(*keys[1:]) if keys else set()
    if any(len(k) != len(shared) for k in keys):
        sizes = ", ".join(f"{run.name}: {len(k)}" for run, k in zip(runs, keys, strict=True))
        warnings.warn(
            f"runs cover different problems ({sizes}); using the {len(shared)} they share",
            stacklevel=2,
        )
    return [k for k in keys[0] if k in shared] if keys else []


def nothing_produced(analysis: str, reason: str) -> int:
    """An analysis that made nothing it was asked for (every judge call failed, no problem in
    common, no usable pair): the first cause on one line of stderr, and exit status 1. What was
    written on the way (a judge's answers, the numbers) stays for a rerun."""
    print(f"groupwise analyze {analysis}: {' '.join(reason.split())}", file=sys.stderr)
    return 1
