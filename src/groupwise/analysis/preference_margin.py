"""Per-problem preference margin (docs/algorithms.md, "Analyses of AMIR-GRPO"; paper Figure 4), the
`groupwise analyze margin` command.

Three things are called a margin around AMIR-GRPO; this module is only the first:
- the preference margin of a problem (here): a post-hoc statistic of saved samples,
  mean l(correct completions) - mean l(incorrect completions);
- the reward margin delta_r of AMIR's pair mining (docs/algorithms.md §2: (i, j) is a pair when
  r_i - r_j > delta_r), a training setting;
- the log-prob margin of one mined pair, l(o_i) - l(o_j), inside the DPO logit z_ij.

preference_margin(q) = mean of l(o) over the correct completions of q - mean of l(o) over its
incorrect ones, with l(o) = (1/|o|) sum_t log pi(o_t | q, o_<t) the length-normalised
log-likelihood under the model that generated o (the saved `mean_logp`, nats per token; with
`--recompute` or `--model` recomputed on any engine, groupwise.analysis.rescoring). Only
problems with at least one correct and one incorrect completion have a margin; completions
without a saved `mean_logp` (empty ones) are left out of the means. Per run: the distribution of
margins and its summary; across runs: the ratio of each run's mean margin to the first run's
(the paper's "2.7x GRPO" is AMIR's mean over GRPO's).
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from groupwise.analysis import rescoring
from groupwise.analysis.runs import load_runs, nothing_produced, warn_if_fewer_samples
from groupwise.records import ProblemKey, Sample, write_json

# Samples per problem in the paper's protocol: not stated by the paper (Figure 4), so no
# warning.
PROTOCOL_SAMPLES: int | None = None


def preference_margins(groups: Mapping[ProblemKey, Sequence[Sample]]) -> dict[ProblemKey, float]:
    """preference_margin(q) for each problem that has both correct and incorrect completions
    with a `mean_logp`; other problems are absent from the result."""
    margins: dict[ProblemKey, float] = {}
    for key, samples in groups.items():
        good = [s.mean_logp for s in samples if s.correct and s.mean_logp is not None]
        bad = [s.mean_logp for s in samples if not s.correct and s.mean_logp is not None]
        if good and bad:
            margins[key] = float(np.mean(good) - np.mean(bad))
    return margins


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """count, mean, median, std (ddof 0), and the fraction of positive margins."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return {"problems": 0, "mean": None, "median": None, "std": None, "positive": None}
    return {
        "problems": int(x.size),
        "mean": float(x.mean()),
        "median": float(np.median(x)),
        "std": float(x.std()),
        "positive": float((x > 0).mean()),
    }


def ratio_of_means(means: Mapping[str, float | None]) -> dict[str, float | None]:
    """Each run's mean margin divided by the first run's; None where undefined, which includes
    a first run whose mean is <= 0 (a ratio to a negative margin reads backwards: a larger
    margin would get a smaller ratio)."""
    names = list(means)
    base = means[names[0]] if names else None
    return {
        n: (None if base is None or base <= 0.0 or means[n] is None else means[n] / base)
        for n in names
    }


def plot_margins(margins: Mapping[str, Sequence[float]], path: Path) -> Path:
    """Left: KDE of the margins of each run with at least MIN_DENSITY_POINTS of them, its mean
    marked; right: box plots of every run with a margin, side by side. The caller draws it only
    when some run has that many (`density_runs`)."""
    from groupwise.figures import (
        gaussian_kde,
        new_figure,
        save_figure,
        scott_bandwidth,
        series_colors,
    )

    names = [n for n in margins if len(margins[n])]
    colors = dict(zip(names, series_colors(len(names)), strict=True))
    fig, axes = new_figure(width=10, height=4, ncols=2)
    dens, box = axes[0, 0], axes[0, 1]
    everything = np.concatenate([np.asarray(margins[n], float) for n in names])
    lo, hi = float(everything.min()), float(everything.max())
    dense = density_runs(margins)
    widths = [scott_bandwidth(margins[n]) for n in dense]
    pad = 3 * max(widths)
    grid = np.linspace(lo - pad, hi + pad, 400)
    for name in dense:
        values = np.asarray(margins[name], float)
        dens.plot(
            grid,
            gaussian_kde(values, grid),
            color=colors[name],
            label=f"{name} (mean {values.mean():.4f}, {values.size} problems)",
        )
        dens.axvline(values.mean(), color=colors[name], linestyle="--", linewidth=1)
    dens.axvline(0.0, color="grey", linewidth=0.8)
    dens.set_xlabel("margin: mean l(correct) - mean l(incorrect)  [nats/token]")
    dens.set_ylabel("density")
    dens.legend(fontsize=8)
    box.boxplot([np.asarray(margins[n], float) for n in names])
    # Labels set on the ticks: boxplot's tick_labels= needs matplotlib 3.9, its labels= is gone
    # in 3.11, and groupwise supports matplotlib 3.8.
    box.set_xticks(range(1, len(names) + 1), [f"{n}\n({len(margins[n])} problems)" for n in names])
    box.axhline(0.0, color="grey", linewidth=0.8)
    box.set_ylabel("margin [nats/token]")
    box.set_title("per-problem preference margin")
    return save_figure(fig, path)


def density_runs(margins: Mapping[str, Sequence[float]]) -> list[str]:
    """The runs whose margins are enough for a density (figures.MIN_DENSITY_POINTS, spread)."""
    from groupwise.figures import MIN_DENSITY_POINTS

    return [
        name
        for name, values in margins.items()
        if len(values) >= MIN_DENSITY_POINTS and float(np.std(values)) > 0
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="NAME=EVAL_DIR",
        help="evaluation runs; ratios are relative to the first (e.g. grpo=... amir=...)",
    )
    parser.add_argument(
        "--benchmark",
        action="append",
        default=None,
        help="restrict to this benchmark (repeatable; default: all)",
    )
    rescoring.add_arguments(parser)
    parser.add_argument("--output", required=True, type=Path, help="folder for figure and data")


def _mixed(groups: Mapping[ProblemKey, Sequence[Sample]]) -> list[ProblemKey]:
    """The problems with both correct and incorrect completions (the ones with a margin)."""
    return [
        k for k, g in groups.items() if any(s.correct for s in g) and not all(s.correct for s in g)
    ]


def run(args: argparse.Namespace) -> int:
    runs = load_runs(args.runs, args.benchmark)
    warn_if_fewer_samples(runs, "margin", PROTOCOL_SAMPLES)
    if not rescoring.recomputing(args):
        for r in runs:
            if all(s.mean_logp is None for s in r.samples):
                raise SystemExit(
                    f"run {r.name!r} ({r.path}) has no saved mean_logp (an engine "
                    "that returned no log-probs?); recompute them with "
                    "--recompute or --model"
                )
    scored = rescoring.scored_groups(args, runs, [_mixed(r.by_problem()) for r in runs], "margin")
    per_run = {r.name: preference_margins(groups) for r, groups in zip(runs, scored, strict=True)}
    out: Path = args.output
    out.mkdir(parents=True, exist_ok=True)
    summary = {n: summarize(list(m.values())) for n, m in per_run.items()}
    ratios = ratio_of_means({n: s["mean"] for n, s in summary.items()})
    write_json(
        out / "margin.json",
        {
            "source": rescoring.source_label(args),
            "runs": summary,
            "ratio_of_means_to_first": ratios,
        },
    )
    with open(out / "margin.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "benchmark", "problem_id", "margin"])
        for name, m in per_run.items():
            for (bench, pid), value in m.items():
                writer.writerow([name, bench, pid, f"{value:.6f}"])
    for name, s in summary.items():
        mean = "-" if s["mean"] is None else f"{s['mean']:.4f}"
        med = "-" if s["median"] is None else f"{s['median']:.4f}"
        ratio = "-" if ratios[name] is None else f"{ratios[name]:.2f}x"
        print(f"{name:<20} problems {s['problems']:>5}  mean {mean}  median {med}  ratio {ratio}")
    values = {n: list(m.values()) for n, m in per_run.items()}
    for name in [n for n in values if n not in density_runs(values)]:
        print(
            f"margin.png: run {name!r} has {len(values[name])} problems with a margin (both a "
            "correct and an incorrect completion), too few (or all equal) for a density: "
            "left out of it"
        )
    from groupwise.figures import figure_not_drawn

    if density_runs(values):
        figure = plot_margins(values, out / "margin.png").name
    else:
        print(figure_not_drawn(out / "margin.png", "no run has enough margins for a density"))
        figure = None
    print(f"wrote {out / 'margin.json'}, margin.csv" + (f", {figure}" if figure else ""))
    if not any(values.values()):
        return nothing_produced(
            "margin",
            "no problem has both a correct and an incorrect completion with a mean_logp in any "
            f"run ({', '.join(values)}): no preference margin to measure",
        )
    return 0
