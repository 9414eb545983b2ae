"""Solvable-set coverage across runs (docs/algorithms.md, "Analyses of AMIR-GRPO"; paper Table 2).

A problem is solvable by a run when at least one of its samples is correct. Over the problems
every run evaluated, each problem falls in one cell of the 2^m partition "which runs solve
it"; cells are reported as percentages of the union of solvable problems (the cell solved by
no run lies outside the union and is reported as a count only). The figure is UpSet-style:
one bar per cell, with the solving runs marked as dots beneath it.
"""

from __future__ import annotations

import argparse
import csv
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from groupwise.analysis.runs import (
    EvalRun,
    common_problems,
    load_runs,
    nothing_produced,
    warn_if_fewer_samples,
)
from groupwise.records import ProblemKey, write_json

# Samples per problem in the paper's protocol: solvable = at least one of 16 rollouts
# correct (paper, Table 2).
PROTOCOL_SAMPLES: int | None = 16


@dataclass(frozen=True)
class CoverageCell:
    """One cell of the partition: `solved[i]` says whether run i solves its problems.

    `percent` is 100 * count / |union of solvable problems| (None for the cell no run solves).
    """

    solved: tuple[bool, ...]
    count: int
    percent: float | None

    def label(self, names: Sequence[str]) -> str:
        inside = [n for n, s in zip(names, self.solved, strict=True) if s]
        return " & ".join(inside) + " only" if inside else "none"


def solvable_set(run: EvalRun, keys: Sequence[ProblemKey]) -> set[ProblemKey]:
    """The problems among `keys` with at least one correct sample in `run`."""
    groups = run.by_problem()
    return {k for k in keys if any(s.correct for s in groups[k])}


def coverage_partition(
    solvable: Mapping[str, set[ProblemKey]], problems: Sequence[ProblemKey]
) -> list[CoverageCell]:
    """The 2^m partition of `problems` by which of the m runs solve them.

    `solvable` maps run name -> its solvable problems (subsets of `problems`). Cells come in a
    fixed order: more solving runs first, then by the runs' order (True before False); the
    all-False cell is last. The percentages of the other cells sum to 100 (or are all 0 when
    nothing is solvable).
    """
    names = list(solvable)
    if not 1 <= len(names) <= 6:
        raise ValueError(f"coverage needs 1 to 6 runs, got {len(names)}")
    union = set().union(*solvable.values())
    stray = union - set(problems)
    if stray:
        raise ValueError(
            f"{len(stray)} solvable problem(s) are not in the problem list, e.g. {sorted(stray)[0]}"
        )
    patterns = sorted(
        itertools.product((True, False), repeat=len(names)),
        key=lambda p: (-sum(p), [not x for x in p]),
    )
    cells = []
    for pattern in patterns:
        count = sum(1 for key in problems if tuple(key in solvable[n] for n in names) == pattern)
        percent = None if not any(pattern) else (100.0 * count / len(union) if union else 0.0)
        cells.append(CoverageCell(solved=pattern, count=count, percent=percent))
    return cells


def problems_label(count: int) -> str:
    """A cell's count as its bar says it: "1 problem", "2 problems" (cells count problems, not
    samples)."""
    return f"{count} problem" if count == 1 else f"{count} problems"


def plot_coverage(
    cells: Sequence[CoverageCell], names: Sequence[str], path: Path, title: str
) -> Path:
    """UpSet-style figure: bars of each cell's percent of the union, each labelled with its
    count of problems (`problems_label`), dot matrix of its runs; `title` wrapped to the bars."""
    from groupwise.figures import new_figure, save_figure, set_wrapped_title

    shown = [c for c in cells if any(c.solved)]
    fig, axes = new_figure(
        width=1.2 + 0.8 * len(shown),
        height=4.6,
        nrows=2,
        gridspec_kw={"height_ratios": [3, 0.4 + 0.35 * len(names)]},
        sharex=True,
    )
    bars, matrix = axes[0, 0], axes[1, 0]
    xs = range(len(shown))
    bars.bar(xs, [c.percent or 0.0 for c in shown], color="#4c72b0")
    for x, cell in zip(xs, shown, strict=True):
        bars.annotate(
            f"{cell.percent:.1f}%\n{problems_label(cell.count)}",
            (x, cell.percent or 0.0),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    bars.set_ylabel("% of solvable problems (union)")
    set_wrapped_title(bars, title)
    bars.set_ylim(0, 115)
    for x, cell in zip(xs, shown, strict=True):
        ys = [i for i, s in enumerate(cell.solved) if s]
        matrix.scatter([x] * len(names), range(len(names)), color="#dddddd", s=40)
        matrix.scatter([x] * len(ys), ys, color="black", s=40)
        if len(ys) > 1:
            matrix.plot([x, x], [min(ys), max(ys)], color="black")
    matrix.set_yticks(range(len(names)), list(names))
    matrix.set_ylim(len(names) - 0.5, -0.5)
    matrix.set_xticks([])
    for side in ("top", "right", "bottom"):
        matrix.spines[side].set_visible(False)
    return save_figure(fig, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="NAME=EVAL_DIR",
        help="2 to 6 evaluation runs, e.g. base=runs/eval-base grpo=... amir=...",
    )
    parser.add_argument(
        "--benchmark",
        action="append",
        default=None,
        help="restrict to this benchmark (repeatable; default: all shared)",
    )
    parser.add_argument("--output", required=True, type=Path, help="folder for figure and data")


def run(args: argparse.Namespace) -> int:
    runs = load_runs(args.runs, args.benchmark)
    warn_if_fewer_samples(runs, "coverage", PROTOCOL_SAMPLES)
    if len(runs) < 2:
        raise SystemExit("coverage compares runs: give at least two NAME=EVAL_DIR")
    names = [r.name for r in runs]
    problems = common_problems(runs)
    if not problems:
        return nothing_produced(
            "coverage",
            f"the runs ({', '.join(names)}) have no problem in common (benchmark and problem "
            "id): evaluate them on the same problems",
        )
    solvable = {r.name: solvable_set(r, problems) for r in runs}
    cells = coverage_partition(solvable, problems)
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    union = len(set().union(*solvable.values()))
    write_json(
        out / "coverage.json",
        {
            "runs": names,
            "problems": len(problems),
            "union_solvable": union,
            "solvable": {n: len(s) for n, s in solvable.items()},
            "cells": [
                {
                    "label": c.label(names),
                    "solved": dict(zip(names, c.solved, strict=True)),
                    "count": c.count,
                    "percent": c.percent,
                }
                for c in cells
            ],
        },
    )
    with open(out / "coverage.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*names, "count", "percent_of_union"])
        for c in cells:
            writer.writerow(
                [
                    *(int(s) for s in c.solved),
                    c.count,
                    "" if c.percent is None else f"{c.percent:.2f}",
                ]
            )
    plot_coverage(
        cells,
        names,
        out / "coverage.png",
        f"Solvable-set coverage ({len(problems)} problems, {union} solvable)",
    )
    print(f"{'cell':<40} {'count':>6} {'% union':>8}")
    for c in cells:
        pct = "-" if c.percent is None else f"{c.percent:.1f}"
        print(f"{c.label(names):<40} {c.count:>6} {pct:>8}")
    print(f"wrote {out / 'coverage.json'}, coverage.csv, coverage.png")
    return 0
