"""The figures of `groupwise report`: the page's training curves, pass@1 bars and held-out
curves; the printed table's figure (--png: reward and held-out accuracy of each run); and one
run's own figure, RUN/run.png, which `groupwise train` draws at its end.

Every per-step curve is smoothed by groupwise.figures.moving_average (trailing), and every
held-out band is the 95 % interval of pass@1 (the accuracy) as training wrote it in
heldout.jsonl (`tables.heldout_table`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from groupwise.report.summary import RunSummary, run_labels, summarize, training_rows
from groupwise.report.tables import benchmarks, heldout_table
from groupwise.run_reader import RunRecord, is_number, read_heldout

# (metrics.jsonl key, panel title); a panel is drawn when at least one run logged its key
CURVES: tuple[tuple[str, str], ...] = (
    ("reward_mean", "mean reward"),
    ("accuracy", "training accuracy"),
    ("group_all_correct", "groups all correct (fraction)"),
    ("group_all_wrong", "groups all wrong (fraction)"),
    ("group_mixed", "mixed groups (fraction)"),
    ("lambda", "lambda_reg (AMIR)"),
    ("policy_loss", "policy loss"),
    ("preference_loss", "preference loss"),
    ("completion_length_mean", "mean completion length (tokens)"),
    ("kl", "KL to reference"),
)
SMOOTHING = 10  # steps of the moving average of the reward in the table's and a run's figure
RUN_FIGURE = "run.png"


def _bounds(table: Mapping[str, Any], key: str) -> tuple[float, float]:
    """table[key_ci] when it is two numbers, else (table[key], table[key]): no band."""
    ci = table.get(f"{key}_ci")
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(is_number(v) for v in ci):
        return float(ci[0]), float(ci[1])
    return float(table[key]), float(table[key])


def plot_curves(records: Sequence[RunRecord], path: Path) -> Path | None:
    """One panel per logged metric, one line per run (raw faint, its moving average over
    steps / 25 solid when a run has more than 50 steps); a run's terms it has not
    (RunRecord.absent) are not drawn, and a panel no run has is left out. None when no run
    logged any metric."""
    from groupwise.figures import moving_average, new_figure, save_figure, series_colors

    panels = [
        (k, t)
        for k, t in CURVES
        if any(k in row for r in records if k not in r.absent for row in r.metrics)
    ]
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = new_figure(width=5 * ncols, height=3.2 * nrows, ncols=ncols, nrows=nrows)
    colors = series_colors(len(records))
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        for record, color in zip(records, colors, strict=True):
            points = [(row["step"], row[key]) for row in record.metrics if is_number(row.get(key))]
            if not points or key in record.absent:
                continue
            steps, values = (np.asarray(v, float) for v in zip(*points, strict=True))
            if steps.size > 50:
                ax.plot(steps, values, color=color, alpha=0.25, linewidth=0.8)
                values = moving_average(values, max(2, steps.size // 25))
            ax.plot(steps, values, color=color, label=record.name)
        ax.set_title(title)
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    return save_figure(fig, path)


def plot_pass1(evals: Mapping[str, Mapping[str, Any]], path: Path) -> Path | None:
    """Grouped bars of pass@1 (percent, with its interval) per benchmark and evaluation."""
    from groupwise.figures import new_figure, save_figure, series_colors

    labels = list(evals)
    benches = list(dict.fromkeys(b for r in evals.values() for b in benchmarks(r)))
    if not benches:
        return None
    fig, axes = new_figure(width=max(6.0, 1.2 * len(benches) * max(1, len(labels)) / 2 + 2))
    ax = axes[0, 0]
    width = 0.8 / len(labels)
    for i, (label, color) in enumerate(zip(labels, series_colors(len(labels)), strict=True)):
        xs, ys, errs = [], [], [[], []]
        for j, bench in enumerate(benches):
            entry = evals[label].get(bench)
            if not entry or not is_number(entry.get("pass@1")):
                continue
            value = 100 * entry["pass@1"]
            lo, hi = (100 * v for v in _bounds(entry, "pass@1"))
            xs.append(j + (i - (len(labels) - 1) / 2) * width)
            ys.append(value)
            errs[0].append(max(0.0, value - lo))
            errs[1].append(max(0.0, hi - value))
        ax.bar(xs, ys, width, yerr=errs, color=color, label=label, capsize=2)
    ax.set_xticks(range(len(benches)), benches, rotation=20, ha="right")
    ax.set_ylabel("pass@1 (%)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _draw_heldout(ax: Any, evaluations: Sequence[Mapping[str, Any]], **style: Any) -> None:
    """Held-out pass@1 (the accuracy, percent) at each evaluation's step, its 95 % interval
    over problems as a band."""
    tables = [heldout_table(e) for e in evaluations]
    steps = [e["step"] for e in evaluations]
    (line,) = ax.plot(steps, [100 * t["pass@1"] for t in tables], marker="o", **style)
    bounds = [_bounds(t, "pass@1") for t in tables]
    ax.fill_between(
        steps,
        [100 * low for low, _ in bounds],
        [100 * high for _, high in bounds],
        color=line.get_color(),
        alpha=0.2,
    )


def plot_heldout(records: Sequence[RunRecord], path: Path) -> Path:
    """Held-out pass@1 (percent) over training steps, one line per run with a held-out
    evaluation, its 95 % interval over problems as a band."""
    from groupwise.figures import new_figure, save_figure, series_colors

    runs = [r for r in records if r.heldout]
    fig, axes = new_figure()
    ax = axes[0, 0]
    for record, color in zip(runs, series_colors(len(runs)), strict=True):
        _draw_heldout(ax, record.heldout, color=color, label=record.name)
    ax.set(xlabel="step", ylabel="held-out pass@1 (%)", title="held-out pass@1 (95 % CI)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_runs(
    runs: Sequence[RunSummary | str | Path], path: str | Path, labels: Sequence[str] = ()
) -> Path:
    """PNG of training reward (per step, faint, and its moving average over SMOOTHING steps)
    and held-out accuracy (each evaluation with its 95 % interval over problems) over steps,
    one line per run (a RunSummary, or a run folder to summarize), named by `labels` (by
    default `run_labels`)."""
    from groupwise.figures import moving_average, new_figure, save_figure

    fig, axes = new_figure(width=11, height=4, ncols=2)
    reward_ax, heldout_ax = axes[0]
    summaries = [run if isinstance(run, RunSummary) else summarize(run) for run in runs]
    for summary, label in zip(summaries, labels or run_labels(summaries), strict=True):
        rows = training_rows(summary.path)
        steps = np.array([row["step"] for row in rows])
        reward = np.array([row["reward_mean"] for row in rows], dtype=np.float64)
        (line,) = reward_ax.plot(steps, moving_average(reward, SMOOTHING), label=label)
        reward_ax.plot(steps, reward, color=line.get_color(), alpha=0.2, linewidth=0.8)
        evaluations = read_heldout(summary.path)
        if evaluations:
            _draw_heldout(heldout_ax, evaluations, color=line.get_color(), label=label)
    reward_ax.set(
        xlabel="step",
        ylabel="mean reward",
        title=f"training reward (per step; line: mean of the last {SMOOTHING})",
    )
    heldout_ax.set(
        xlabel="step",
        ylabel="accuracy (%)",
        title="held-out accuracy (band: 95 % CI over problems)",
    )
    for ax in (reward_ax, heldout_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, path)


def plot_run(run_dir: str | Path, path: str | Path | None = None) -> Path:
    """The figure of one run (RUN/run.png by default): the panels of what the run did, none of
    a term its method does not use. Always: training reward (and its moving average over
    SMOOTHING steps) and the group shares (mixed / all-correct / all-wrong); with held-out
    evaluations, held-out accuracy with its 95 % interval over problems; LENS: the share of
    all-wrong groups that got a gradient; AMIR-GRPO: pairs per group and lambda_reg."""
    from groupwise.figures import new_figure, save_figure

    run_dir = Path(run_dir)
    summary = summarize(run_dir)
    rows = training_rows(run_dir)
    evaluations = read_heldout(run_dir)
    panels = ["reward", *(["heldout"] if evaluations else []), "groups"]
    if "LENS" in summary.label:
        panels.append("all_wrong")
    if any("lambda" in row for row in rows):
        panels += ["pairs", "lambda"]
    fig, axes = new_figure(width=3.6 * len(panels), height=3.4, ncols=len(panels))
    for ax, panel in zip(axes[0], panels, strict=True):
        if panel == "heldout":
            _draw_heldout(ax, evaluations, color="C1")
            ax.set(title="held-out accuracy (95 % CI)", ylabel="accuracy (%)")
        else:
            _draw_series(ax, panel, rows)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{summary.label}: {run_dir}", fontsize=10)
    return save_figure(fig, Path(path) if path is not None else run_dir / RUN_FIGURE)


# panel -> (metrics.jsonl key, its scale, colour, title, y label); "groups" draws three keys.
_SERIES_PANELS = {
    "all_wrong": (
        "group_all_wrong_active",
        100,
        "C3",
        "all-wrong groups with a gradient",
        "share of groups (%)",
    ),
    "pairs": ("pairs_per_group", 1, "C4", "AMIR-GRPO pairs per group", "pairs"),
    "lambda": ("lambda", 1, "C5", "AMIR-GRPO lambda_reg", "lambda"),
}


def _draw_series(ax: Any, panel: str, rows: list[dict[str, Any]]) -> None:
    """One panel of per-step metrics: reward (raw and moving average), group shares, or one of
    _SERIES_PANELS."""
    from groupwise.figures import moving_average

    steps = np.array([row["step"] for row in rows])

    def series(key: str) -> np.ndarray:
        return np.array([row.get(key, np.nan) for row in rows], dtype=np.float64)

    if panel == "reward":
        reward = series("reward_mean")
        ax.plot(steps, reward, alpha=0.3, linewidth=0.8)
        ax.plot(steps, moving_average(reward, SMOOTHING), color="C0")
        ax.set(title=f"training reward (line: mean of {SMOOTHING})", ylabel="mean reward")
    elif panel == "groups":
        for key, name in (
            ("group_mixed", "mixed"),
            ("group_all_correct", "all-correct"),
            ("group_all_wrong", "all-wrong"),
        ):
            ax.plot(steps, 100 * series(key), label=name)
        ax.set(title="groups", ylabel="share of groups (%)")
        ax.legend(fontsize=8)
    else:
        key, scale, color, title, ylabel = _SERIES_PANELS[panel]
        ax.plot(steps, scale * series(key), color=color)
        ax.set(title=title, ylabel=ylabel)
