"""Conditional perplexity of rollouts under the model that generated them (docs/algorithms.md,
"Analyses of AMIR-GRPO"; paper Figure 3).

    PPL_m(Y | x) = exp( -(1/T) sum_t log p_m(y_t | x, y_<t) ) = exp(-mean_logp)

`groupwise eval` saves mean_logp for every completion (raw model distribution, temperature 1),
so the analysis needs no model; `--recompute` scores the completions again under each run's
own model (from its saved config), and `--model` scores every run's completions under one
fixed model instead (e.g. the base model, as in Yue et al. 2025), on any engine
(groupwise.analysis.rescoring: transformers, vLLM, or a server's echoed log-probs).

Strata over the problems every run evaluated: "jointly solvable" = every run solves the
problem in at least `solvable_fraction` of its samples (default 1.0: all samples correct, the
paper's "consistently correct"); "jointly unsolved" = no run has a correct sample.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from groupwise.analysis import rescoring
from groupwise.analysis.runs import (
    EvalRun,
    common_problems,
    load_runs,
    nothing_produced,
    warn_if_fewer_samples,
)
from groupwise.records import ProblemKey, write_json

STRATA = ("jointly solvable", "jointly unsolved")

# Samples per problem in the paper's protocol: 16 rollouts per problem (paper, Figure 3).
PROTOCOL_SAMPLES: int | None = 16


def perplexity(mean_logp: float) -> float:
    """PPL = exp(-mean_logp), mean_logp in nats per token."""
    return math.exp(-mean_logp)


def strata(runs: Sequence[EvalRun], solvable_fraction: float = 1.0) -> dict[str, list[ProblemKey]]:
    """The problems shared by all runs, split into STRATA (others belong to neither).

    Jointly solvable: in every run the fraction of correct samples is >= solvable_fraction (and
    > 0); jointly unsolved: no correct sample in any run.
    """
    if not 0.0 < solvable_fraction <= 1.0:
        raise ValueError(f"solvable_fraction must be in (0, 1], got {solvable_fraction}")
    groups = [r.by_problem() for r in runs]
    out: dict[str, list[ProblemKey]] = {name: [] for name in STRATA}
    for key in common_problems(runs):
        accuracy = [float(np.mean([s.correct for s in g[key]])) for g in groups]
        if all(a >= solvable_fraction and a > 0 for a in accuracy):
            out[STRATA[0]].append(key)
        elif all(a == 0 for a in accuracy):
            out[STRATA[1]].append(key)
    return out


def _box_stats(values: Sequence[float]) -> dict[str, float | int | None]:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return {"rollouts": 0, "median": None, "q1": None, "q3": None, "mean": None}
    q1, median, q3 = np.percentile(x, [25, 50, 75])
    return {
        "rollouts": int(x.size),
        "median": float(median),
        "q1": float(q1),
        "q3": float(q3),
        "mean": float(x.mean()),
    }


def plot_perplexity(
    ppl: Mapping[str, Mapping[str, Sequence[float]]],
    path: Path,
    problems: Mapping[str, int] | None = None,
) -> Path:
    """One panel per stratum, one box per run (ppl[stratum][run] = rollout perplexities);
    `problems[stratum]`, when given, is shown in the panel title. Each panel has its own y
    scale: solved problems' rollouts sit near PPL 1, unsolved ones' far above, and a shared
    axis would flatten the first panel to a line."""
    from groupwise.figures import new_figure, save_figure, series_colors

    fig, axes = new_figure(width=4.5 * len(ppl), height=4, ncols=len(ppl))
    for ax, (stratum, per_run) in zip(axes[0], ppl.items(), strict=True):
        names = list(per_run)
        parts = ax.boxplot([np.asarray(per_run[n], float) for n in names], patch_artist=True)
        # On the ticks: tick_labels= needs matplotlib 3.9, labels= is gone in 3.11.
        ax.set_xticks(range(1, len(names) + 1), names)
        for patch, color in zip(parts["boxes"], series_colors(len(names)), strict=True):
            patch.set_facecolor(color)
            patch.set_alpha(0.5)
        count = f" ({problems[stratum]} problems)" if problems else ""
        ax.set_title(stratum + count)
        if not any(len(v) for v in per_run.values()):
            ax.text(
                0.5,
                0.5,
                "no problems in this stratum",
                transform=ax.transAxes,
                ha="center",
                va="center",
                color="grey",
            )
        ax.set_ylabel("PPL_m(Y | x)")
    return save_figure(fig, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="NAME=EVAL_DIR",
        help="evaluation runs, e.g. grpo=runs/eval-grpo amir=runs/eval-amir",
    )
    parser.add_argument(
        "--benchmark",
        action="append",
        default=None,
        help="restrict to this benchmark (repeatable; default: all)",
    )
    parser.add_argument(
        "--solvable-fraction",
        type=float,
        default=1.0,
        help="a run 'solves' a problem when at least this fraction of its "
        "samples are correct (default 1.0, the paper's stratum)",
    )
    parser.add_argument(
        "--max-problems",
        type=int,
        default=None,
        help="randomly keep at most this many problems per stratum "
        "(paper: 3 per stratum, 6 in all)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of that random choice")
    rescoring.add_arguments(parser)
    parser.add_argument("--output", required=True, type=Path, help="folder for figure and data")


def run(args: argparse.Namespace) -> int:
    runs = load_runs(args.runs, args.benchmark)
    warn_if_fewer_samples(runs, "perplexity", PROTOCOL_SAMPLES)
    if not set.intersection(*(set(r.by_problem()) for r in runs)):
        return nothing_produced(
            "perplexity",
            f"the runs ({', '.join(r.name for r in runs)}) have no problem in common "
            "(benchmark and problem id): evaluate them on the same problems",
        )
    split = strata(runs, args.solvable_fraction)
    if not any(split.values()):
        return nothing_produced(
            "perplexity",
            "no shared problem is jointly solvable (every run correct in at least "
            f"{args.solvable_fraction:g} of its samples) or jointly unsolved (no run correct): "
            "no stratum to compare; try a lower --solvable-fraction",
        )
    if args.max_problems is not None:
        rng = random.Random(args.seed)
        split = {k: sorted(rng.sample(v, min(len(v), args.max_problems))) for k, v in split.items()}
    ppl: dict[str, dict[str, list[float]]] = {s: {} for s in STRATA}
    rows: list[list[Any]] = []
    scored = rescoring.scored_groups(
        args, runs, [[k for keys in split.values() for k in keys] for _ in runs], "perplexity"
    )
    for r, values in zip(runs, scored, strict=True):
        for stratum, keys in split.items():
            samples = [s for k in keys for s in values[k]]
            ppl[stratum][r.name] = [
                perplexity(s.mean_logp) for s in samples if s.mean_logp is not None
            ]
            rows += [
                [r.name, stratum, s.benchmark, s.problem_id, s.sample, perplexity(s.mean_logp)]
                for s in samples
                if s.mean_logp is not None
            ]
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    source = rescoring.source_label(args)
    write_json(
        out / "perplexity.json",
        {
            "source": source,
            "solvable_fraction": args.solvable_fraction,
            "problems": {s: [list(k) for k in keys] for s, keys in split.items()},
            "stats": {s: {n: _box_stats(v) for n, v in per.items()} for s, per in ppl.items()},
        },
    )
    with open(out / "perplexity.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "stratum", "benchmark", "problem_id", "sample", "ppl"])
        writer.writerows(rows)
    plot_perplexity(ppl, out / "perplexity.png", {s: len(k) for s, k in split.items()})
    for stratum, per in ppl.items():
        print(f"{stratum}: {len(split[stratum])} problems")
        for name, values in per.items():
            stats = _box_stats(values)
            median = "-" if stats["median"] is None else f"{stats['median']:.3f}"
            print(f"  {name:<20} rollouts {stats['rollouts']:>5}  median PPL {median}")
    print(f"wrote {out / 'perplexity.json'}, perplexity.csv, perplexity.png")
    return 0
