"""The figures of `groupwise report`: the page's training curves, pass@1 bars and held-out
curves; the printed table's figure (--png: reward and held-out accuracy of each run); and one
run's own figure, RUN/run.png, which `groupwise train` draws at its end.

One rule smooths every per-step curve (`smoothing_window`: a trailing mean of the last
max(SMOOTHING, steps / 25) steps, groupwise.figures.moving_average, for runs of more than
2 x SMOOTHING steps; shorter runs are drawn per step only), and every figure says so in the
same words (`smoothing_note`). Rewards of different definitions (another weighting, the
overlong penalty: methods.reward_name) are on different scales, so each definition gets its
own panel. Every held-out band is the 95 % interval of pass@1 (the accuracy) as training wrote
it in heldout.jsonl (`tables.heldout_table`); past BAND_RUNS runs in one panel the intervals are
error bars, side by side, so that they stay apart. Legends sit outside the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from groupwise.report.methods import reward_name
from groupwise.report.summary import RunSummary, run_labels, summarize, training_rows
from groupwise.report.tables import benchmarks, heldout_table
from groupwise.run_reader import RunRecord, is_number, read_config, read_heldout

# (metrics.jsonl key, panel title); a panel is drawn when at least one run logged its key
CURVES: tuple[tuple[str, str], ...] = (
    ("reward_mean", "mean reward"),
    ("accuracy", "training accuracy"),
    ("group_all_correct", "groups all correct (fraction of groups trained on)"),
    ("group_all_wrong", "groups all wrong (fraction of groups trained on)"),
    ("group_mixed", "mixed groups (fraction of groups trained on)"),
    ("lambda", "lambda_reg (AMIR)"),
    ("policy_loss", "policy loss"),
    ("preference_loss", "preference loss"),
    ("completion_length_mean", "mean completion length (tokens)"),
    ("kl", "KL to reference"),
)
SMOOTHING = 10  # the shortest window of the trailing mean, in steps
BAND_RUNS = 3  # at most this many runs share a panel's held-out bands; more get error bars
RUN_FIGURE = "run.png"


def smoothing_window(steps: int) -> int:
    """The trailing mean's window for a run of `steps` logged steps: max(SMOOTHING, steps //
    25) past 2 x SMOOTHING steps; 1 (no mean, the steps as they are) up to there."""
    return max(SMOOTHING, steps // 25) if steps > 2 * SMOOTHING else 1


def smoothing_note(step_counts: Sequence[int]) -> str:
    """What the lines of runs of these lengths (logged steps) are, as every figure and the page
    say it: 'faint: per step; solid: trailing mean of the last 10 steps', or 'per step' where
    no run is long enough for a mean."""
    windows = sorted({smoothing_window(n) for n in step_counts} - {1})
    if not windows:
        return "per step"
    what = f"{windows[0]}" if len(windows) == 1 else f"{windows[0]} to {windows[-1]}"
    note = f"faint: per step; solid: trailing mean of the last {what} steps"
    if any(smoothing_window(n) == 1 for n in step_counts):
        note += f" (runs of up to {2 * SMOOTHING} steps: per step)"
    return note


def _draw_smoothed(ax: Any, steps: np.ndarray, values: np.ndarray, **style: Any) -> Any:
    """The per-step values, faint, and their trailing mean solid (`smoothing_window`); one
    solid line where the run is too short for a mean. Returns the solid line."""
    from groupwise.figures import moving_average

    window = smoothing_window(len(values))
    if window == 1:
        (line,) = ax.plot(steps, values, marker="." if len(values) < 30 else None, **style)
        return line
    (line,) = ax.plot(steps, moving_average(values, window), **style)
    ax.plot(steps, values, color=line.get_color(), alpha=0.25, linewidth=0.8)
    return line


def _integer_steps(ax: Any) -> None:
    """Ticks of the step axis at whole steps only."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _legend_outside(fig: Any, axes: Sequence[Any], slot: Any = None) -> None:
    """One legend of every labelled line of `axes` (no duplicates), off the data: in `slot`
    (an unused panel, its axis off) where given, else below the figure's panels."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if not handles:
        return
    if slot is not None:
        slot.legend(list(handles.values()), list(handles), loc="center", frameon=False)
        return
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=min(4, len(handles)),
        fontsize=8,
        frameon=False,
    )


def _bounds(table: Mapping[str, Any], key: str) -> tuple[float, float]:
    """table[key_ci] when it is two numbers, else (table[key], table[key]): no band."""
    ci = table.get(f"{key}_ci")
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(is_number(v) for v in ci):
        return float(ci[0]), float(ci[1])
    return float(table[key]), float(table[key])


def _reward_of(path: Path) -> str:
    """The reward a run folder's config.yaml defines (methods.reward_name); '' unknown."""
    config = read_config(path) if path.is_dir() else None
    return reward_name(config) if isinstance(config, dict) else ""


def _panels(records: Sequence[RunRecord]) -> list[tuple[str, str, list[RunRecord]]]:
    """(key, title, runs drawn) of each panel of `plot_curves`: CURVES that a run logged, and
    the mean reward once per reward definition where the runs' rewards differ."""
    rewards = {id(r): _reward_of(r.path) for r in records}
    distinct = list(dict.fromkeys(rewards.values()))
    panels = []
    for key, title in CURVES:
        runs = [r for r in records if key not in r.absent and any(key in m for m in r.metrics)]
        if not runs:
            continue
        if key != "reward_mean" or len(distinct) == 1:
            panels.append((key, title, runs))
            continue
        for reward in distinct:
            mine = [r for r in runs if rewards[id(r)] == reward]
            if mine:
                panels.append((key, f"{title} (reward: {reward or 'not recorded'})", mine))
    return panels


def plot_curves(records: Sequence[RunRecord], path: Path) -> Path | None:
    """One panel per logged metric (one per reward definition for the mean reward), one line
    per run (`_draw_smoothed`); a run's terms it has not (RunRecord.absent) are not drawn, and
    a panel no run has is left out; the legend below the panels. None when no run logged any
    metric."""
    from groupwise.figures import new_figure, save_figure, series_colors, set_wrapped_title

    panels = _panels(records)
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = new_figure(width=5 * ncols, height=3.2 * nrows, ncols=ncols, nrows=nrows)
    colors = dict(zip((id(r) for r in records), series_colors(len(records)), strict=True))
    for ax, (key, title, runs) in zip(axes.flat, panels, strict=False):
        for record in runs:
            points = [(row["step"], row[key]) for row in record.metrics if is_number(row.get(key))]
            if points:
                steps, values = (np.asarray(v, float) for v in zip(*points, strict=True))
                _draw_smoothed(ax, steps, values, color=colors[id(record)], label=record.name)
        set_wrapped_title(ax, title)
        ax.set_xlabel("step")
        _integer_steps(ax)
    spare = list(axes.flat)[len(panels) :]
    for ax in spare:
        ax.set_axis_off()
    # the legend in a spare slot of the grid where there is one, else below the panels
    _legend_outside(fig, list(axes.flat)[: len(panels)], spare[0] if spare else None)
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
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save_figure(fig, path)


def _draw_heldout(
    ax: Any,
    evaluations: Sequence[Mapping[str, Any]],
    band: bool = True,
    shift: float = 0.0,
    **style: Any,
) -> None:
    """Held-out pass@1 (the accuracy, percent) at each evaluation's step, its 95 % interval
    over problems as a band, or (band False) as error bars drawn `shift` steps to the side."""
    tables = [heldout_table(e) for e in evaluations]
    steps = np.array([e["step"] for e in evaluations], dtype=np.float64)
    values = np.array([100 * t["pass@1"] for t in tables])
    bounds = np.array([[100 * v for v in _bounds(t, "pass@1")] for t in tables])
    if band:
        (line,) = ax.plot(steps, values, marker="o", **style)
        ax.fill_between(steps, bounds[:, 0], bounds[:, 1], color=line.get_color(), alpha=0.12)
        return
    errors = np.maximum(0.0, np.stack([values - bounds[:, 0], bounds[:, 1] - values]))
    ax.errorbar(steps + shift, values, yerr=errors, marker="o", capsize=3, **style)


def _shifts(count: int, steps: Sequence[float]) -> list[float]:
    """Offsets in steps that set `count` runs' error bars side by side at one evaluation: a
    fifth of the shortest gap between evaluation steps, spread evenly."""
    gaps = np.diff(sorted(set(steps)))
    width = 0.2 * (float(gaps.min()) if gaps.size else 1.0)
    return [width * (i - (count - 1) / 2) / max(1, count - 1) for i in range(count)]


def _draw_heldout_runs(
    ax: Any, runs: Sequence[tuple[Sequence[Mapping[str, Any]], str, str]]
) -> str:
    """Each run's (evaluations, colour, label) in one panel: bands up to BAND_RUNS runs, error
    bars side by side past it. Returns what the intervals are drawn as, for the title."""
    band = len(runs) <= BAND_RUNS
    steps = [e["step"] for evaluations, _, _ in runs for e in evaluations]
    for (evaluations, color, label), shift in zip(runs, _shifts(len(runs), steps), strict=True):
        _draw_heldout(ax, evaluations, band=band, shift=shift, color=color, label=label)
    return "band" if band else "bars"


def plot_heldout(records: Sequence[RunRecord], path: Path) -> Path:
    """Held-out pass@1 (percent) over training steps, one line per run with a held-out
    evaluation, its 95 % interval over problems as a band (error bars past BAND_RUNS runs);
    the legend beside the panel."""
    from groupwise.figures import new_figure, save_figure, series_colors

    runs = [r for r in records if r.heldout]
    fig, axes = new_figure(width=7.5)
    ax = axes[0, 0]
    colors = series_colors(len(runs))
    named = [(r.heldout, c, r.name) for r, c in zip(runs, colors, strict=True)]
    drawn = _draw_heldout_runs(ax, named)
    ax.set(xlabel="step", ylabel="held-out pass@1 (%)")
    _integer_steps(ax)
    ax.set_title(f"held-out pass@1 ({drawn}: 95 % CI)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save_figure(fig, path)


def plot_runs(
    runs: Sequence[RunSummary | str | Path], path: str | Path, labels: Sequence[str] = ()
) -> Path:
    """PNG of each run (a RunSummary, or a run folder to summarize), named by `labels` (by
    default `run_labels`): training reward over steps (`_draw_smoothed`), one panel per reward
    definition (methods.reward_name), and held-out accuracy at each evaluation with its 95 %
    interval over problems (bands, or error bars past BAND_RUNS runs); the legend below."""
    from groupwise.figures import new_figure, save_figure, series_colors, set_wrapped_title

    summaries = [run if isinstance(run, RunSummary) else summarize(run) for run in runs]
    labels = list(labels or run_labels(summaries))
    rewards = [_reward_of(s.path) for s in summaries]
    distinct = list(dict.fromkeys(rewards))
    fig, axes = new_figure(width=5.5 * (len(distinct) + 1), height=4, ncols=len(distinct) + 1)
    colors = series_colors(len(summaries))
    rows = [training_rows(s.path) for s in summaries]
    for ax, reward in zip(axes[0], distinct, strict=False):
        for mine, label, color, reward_of in zip(rows, labels, colors, rewards, strict=True):
            if reward_of == reward:
                steps = np.array([row["step"] for row in mine])
                values = np.array([row["reward_mean"] for row in mine], dtype=np.float64)
                _draw_smoothed(ax, steps, values, color=color, label=label)
        title = "training reward" + (f" (reward: {reward})" if len(distinct) > 1 else "")
        set_wrapped_title(ax, f"{title}; {smoothing_note([len(r) for r in rows])}")
        ax.set(xlabel="step", ylabel="mean reward")
    heldout_ax = axes[0, -1]
    with_heldout = [
        (read_heldout(s.path), color, label)
        for s, color, label in zip(summaries, colors, labels, strict=True)
    ]
    drawn = _draw_heldout_runs(heldout_ax, [run for run in with_heldout if run[0]])
    heldout_ax.set(xlabel="step", ylabel="accuracy (%)")
    set_wrapped_title(heldout_ax, f"held-out accuracy ({drawn}: 95 % CI over problems)")
    for ax in axes[0]:
        _integer_steps(ax)
        ax.grid(alpha=0.3)
    _legend_outside(fig, list(axes[0]))
    return save_figure(fig, path)


def plot_run(run_dir: str | Path, path: str | Path | None = None) -> Path:
    """The figure of one run (RUN/run.png by default): the panels of what the run did, none of
    a term its method does not use. Always: training reward (`_draw_smoothed`) and the group
    shares (mixed / all-correct / all-wrong; with dynamic sampling those of the groups kept,
    and the dropped ones as shares of the groups sampled); with held-out evaluations, held-out
    accuracy with its 95 % interval over problems; LENS, or any run whose all-wrong groups got a
    gradient (other reward parts, as the overlong penalty): the share of groups that are
    all-wrong with a non-zero advantage; AMIR-GRPO: pairs per group and lambda_reg."""
    from groupwise.figures import new_figure, save_figure

    run_dir = Path(run_dir)
    summary = summarize(run_dir)
    rows = training_rows(run_dir)
    evaluations = read_heldout(run_dir)
    panels = ["reward", *(["heldout"] if evaluations else []), "groups"]
    if "LENS" in summary.label or summary.all_wrong_with_gradient:
        panels.append("all_wrong")
    if any("lambda" in row for row in rows):
        panels += ["pairs", "lambda"]
    fig, axes = new_figure(width=4.0 * len(panels), height=3.8, ncols=len(panels))
    for ax, panel in zip(axes[0], panels, strict=True):
        if panel == "heldout":
            _draw_heldout(ax, evaluations, color="C1")
            ax.set(title="held-out accuracy (95 % CI)", ylabel="accuracy (%)")
        else:
            _draw_series(ax, panel, rows, summary.dynamic_sampling)
        ax.set_xlabel("step")
        _integer_steps(ax)
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
_GROUPS = (("mixed", "mixed"), ("all_correct", "all-correct"), ("all_wrong", "all-wrong"))


def _draw_series(ax: Any, panel: str, rows: list[dict[str, Any]], dropping: bool) -> None:
    """One panel of per-step metrics: reward (`_draw_smoothed`), group shares (`dropping`:
    the run's dynamic sampling dropped groups, `_draw_groups`), or one of _SERIES_PANELS."""
    from groupwise.figures import set_wrapped_title

    steps = np.array([row["step"] for row in rows])

    def series(key: str) -> np.ndarray:
        return np.array([row.get(key, np.nan) for row in rows], dtype=np.float64)

    if panel == "reward":
        _draw_smoothed(ax, steps, series("reward_mean"), color="C0")
        set_wrapped_title(ax, f"training reward ({smoothing_note([len(rows)])})")
        ax.set_ylabel("mean reward")
    elif panel == "groups":
        _draw_groups(ax, steps, series, dropping)
    else:
        key, scale, color, title, ylabel = _SERIES_PANELS[panel]
        ax.plot(steps, scale * series(key), color=color)
        ax.set(title=title, ylabel=ylabel)


def _draw_groups(ax: Any, steps: np.ndarray, series: Any, dropping: bool) -> None:
    """The shares of mixed / all-correct / all-wrong groups per step; with dynamic sampling
    (`dropping`) these are of the groups trained on (solid), and the groups it dropped are
    drawn as shares of all groups sampled (dashed: groups_dropped_<kind> / (groups_kept + the
    groups dropped)). The legend below the panel."""
    for index, (key, name) in enumerate(_GROUPS):
        ax.plot(steps, 100 * series(f"group_{key}"), color=f"C{index}", label=name)
    if dropping:
        # a kind no group of a step was dropped as may be missing from its row: 0 of them
        dropped_of = {k: np.nan_to_num(series(f"groups_dropped_{k}")) for k, _ in _GROUPS}
        sampled = series("groups_kept") + sum(dropped_of.values())
        for index, (key, name) in enumerate(_GROUPS):
            dropped = dropped_of[key]
            if np.nansum(dropped) > 0:
                label = f"{name} dropped"
                ax.plot(steps, 100 * dropped / sampled, "--", color=f"C{index}", label=label)
    title = "groups trained on; --: dropped, of sampled" if dropping else "groups"
    ax.set(title=title, ylabel="share of groups (%)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
