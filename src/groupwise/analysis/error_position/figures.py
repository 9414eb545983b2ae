"""The numbers of each run (`summarize_run`: counts per error type, the relative positions of
the first error and their density) and the figures drawn from them (`plot_errors`; paper
Figures 5-6)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from groupwise.analysis.error_position.judging import ErrorItem
from groupwise.analysis.error_position.taxonomy import ErrorType

ERROR_FIGURES = ("errors_types.png", "errors_position.png")


def summarize_run(
    items: Sequence[ErrorItem], taxonomy: Sequence[ErrorType], grid: Sequence[float]
) -> dict[str, Any]:
    """Counts per error type, relative positions, their KDE on `grid`, and the failures."""
    from groupwise.figures import gaussian_kde

    judged = [i for i in items if i.judgement is not None]
    positions = [float(i.relative_position) for i in judged]  # type: ignore[arg-type]
    types = Counter(i.judgement.type for i in judged)  # type: ignore[union-attr]
    failed = [i for i in items if i.judgement is None]
    reasons = Counter((i.error or "unknown").split(":")[0] for i in failed)
    return {
        "solutions": len(items),
        "judged": len(judged),
        "judge_failures": len(failed),
        "failure_reasons": dict(reasons),
        "failed": [
            {
                "benchmark": i.sample.benchmark,
                "problem_id": i.sample.problem_id,
                "sample": i.sample.sample,
                "error": i.error,
            }
            for i in failed
        ],
        "types": {t.name: types.get(t.name, 0) for t in taxonomy},
        "mean_relative_position": float(np.mean(positions)) if positions else None,
        "relative_positions": positions,
        "density": {
            "grid": list(map(float, grid)),
            "values": gaussian_kde(positions, grid).tolist(),
        },
    }


def plot_errors(
    summary: Mapping[str, Mapping[str, Any]], taxonomy: Sequence[ErrorType], out: Path
) -> tuple[list[Path], list[str]]:
    """errors_types.png (share of each type per run, from the runs with a judged solution) and
    errors_position.png (the KDE per run, from the runs with at least MIN_DENSITY_POINTS judged
    solutions). Returns the figures drawn and, for each figure or run left out, why."""
    from groupwise.figures import (
        MIN_DENSITY_POINTS,
        figure_not_drawn,
        new_figure,
        save_figure,
        series_colors,
    )

    judged = [name for name in summary if summary[name]["judged"]]
    if not judged:
        reason = "no solution was judged (every judge call failed; see errors.json)"
        return [], [figure_not_drawn(out / name, reason) for name in ERROR_FIGURES]
    colors = dict(zip(summary, series_colors(len(summary)), strict=True))
    fig, axes = new_figure(width=max(6.0, 1.3 * len(taxonomy)), height=4.2)
    ax = axes[0, 0]
    width = 0.8 / len(judged)
    for i, name in enumerate(judged):
        counts = np.array([summary[name]["types"][t.name] for t in taxonomy], float)
        ax.bar(
            np.arange(len(taxonomy)) + (i - (len(judged) - 1) / 2) * width,
            100 * counts / counts.sum(),
            width,
            color=colors[name],
            label=f"{name} ({int(counts.sum())} judged solutions)",
        )
    ax.set_xticks(range(len(taxonomy)), [t.name for t in taxonomy], rotation=25, ha="right")
    ax.set_ylabel("% of judged failures")
    ax.set_title("type of the first error")
    ax.legend(fontsize=8)
    paths, notes = [save_figure(fig, out / ERROR_FIGURES[0])], []
    dense = [name for name in judged if summary[name]["judged"] >= MIN_DENSITY_POINTS]
    notes += [
        f"errors_position.png: run {name!r} left out, {summary[name]['judged']} judged "
        f"solutions (a density needs {MIN_DENSITY_POINTS})"
        for name in summary
        if name not in dense
    ]
    if not dense:
        reason = f"no run has {MIN_DENSITY_POINTS} judged solutions, what a density needs"
        return paths, [*notes, figure_not_drawn(out / ERROR_FIGURES[1], reason)]
    fig, axes = new_figure()
    ax = axes[0, 0]
    for name in dense:
        density = summary[name]["density"]
        ax.plot(
            density["grid"],
            density["values"],
            color=colors[name],
            label=f"{name} ({summary[name]['judged']} judged solutions)",
        )
    ax.set_xlabel("relative position of the first error (step / number of steps)")
    ax.set_ylabel("density (Gaussian KDE)")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=8)
    paths.append(save_figure(fig, out / ERROR_FIGURES[1]))
    return paths, notes
