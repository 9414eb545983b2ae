"""Shared figure helpers: the headless matplotlib backend, saving, wrapped titles and labels, a
numpy Gaussian KDE and the moving average of per-step curves.

Every analysis writes its figures through `save_figure`, so they all come out at the same
resolution and file type, and nothing drawn is cut off at the edge (the saved area grows to hold
every label). Importing this module selects the Agg backend (no display needed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported: no display on servers

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

DPI = 130
# A kernel density of fewer points shows the kernel's bell, not the data's shape (one point gives
# a bell as tall as 1 / (h sqrt(2 pi)) whatever the data): a density curve needs this many.
MIN_DENSITY_POINTS = 5
# The margin kept around everything drawn when a figure is saved, in inches.
SAVE_PAD_INCHES = 0.1
# Mean width of a character of the default font (DejaVu Sans) in ems, a little above its real
# mean (about 0.55), so that a title wrapped to this estimate fits its axes.
_CHAR_WIDTH_EM = 0.6
# Where a line may break: after a space, before "@" (benchmark specs) and after "/" (paths),
# which have no spaces.
_BREAKS = re.compile(r"(?<= )|(?=@)|(?<=/)")


def new_figure(
    width: float = 6.4, height: float = 4.0, ncols: int = 1, nrows: int = 1, **kwargs: object
) -> tuple[Figure, np.ndarray]:
    """A figure and its axes as a 2-D array [nrows, ncols] (always an array, even for one)."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, **kwargs)
    return fig, axes


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG to `path` (parents created), close it, and return the path; an
    earlier reason for not drawing it (figure_not_drawn) is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    # tight_layout alone leaves a title or a rotated tick label wider than the figure cut off at
    # its edge: the saved area is grown to everything drawn instead.
    fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=SAVE_PAD_INCHES)
    plt.close(fig)
    not_drawn_note(path).unlink(missing_ok=True)
    return path


def wrap_text(text: str, width: int) -> str:
    """`text` broken into lines of at most `width` characters where it may break: after a
    space, before "@" and after "/" (benchmark specs and paths have no spaces). A piece longer
    than `width` stays whole on its own line; lines given in `text` are kept."""
    lines: list[str] = []
    for given in text.split("\n"):
        line = ""
        for piece in _BREAKS.split(given):
            if line and len(line.rstrip()) + len(piece.rstrip()) > width:
                lines.append(line.rstrip())
                line = ""
            line += piece
        lines.append(line.rstrip())
    return "\n".join(lines)


def set_wrapped_title(ax: Axes, title: str) -> None:
    """Set `title` on `ax`, wrapped (`wrap_text`) to the axes' width at the title's font size,
    so that a long model or run name does not run past the figure."""
    ax.set_title(title)
    font_points = ax.title.get_fontsize()
    width_points = ax.get_position().width * ax.figure.get_figwidth() * 72
    ax.set_title(wrap_text(title, max(10, int(width_points / (_CHAR_WIDTH_EM * font_points)))))


def figure_not_drawn(path: str | Path, reason: str) -> str:
    """Record that the figure `path` is not drawn (too little data to mean anything): an older
    figure of that name is removed, so that no stale one is read as this run's, and `reason` is
    written beside it (`not_drawn_note`). Returns the line to print."""
    path = Path(path)
    path.unlink(missing_ok=True)
    note = not_drawn_note(path)
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(f"{path.name} not drawn: {reason}\n", encoding="utf-8")
    return f"{path.name} not drawn: {reason} (written to {note})"


def not_drawn_note(path: Path) -> Path:
    """Where figure_not_drawn writes why `path` is not drawn: NAME.png -> NAME.not-drawn.txt
    (save_figure removes it when the figure is drawn after all)."""
    return path.with_suffix(".not-drawn.txt")


def series_colors(count: int) -> list[str]:
    """`count` distinct colours from the default cycle (wrapping around past ten)."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(count)]


def moving_average(values: Sequence[float] | np.ndarray, window: int) -> np.ndarray:
    """float64 [N]: the trailing moving average of a per-step series [N], the mean of each value
    and the window - 1 before it (fewer at the start), NaNs left out (NaN where the window
    holds none). The one smoothing of the training curves (`groupwise report`, the testbed)."""
    x = np.asarray(values, dtype=np.float64)
    defined = ~np.isnan(x)
    sums = np.concatenate([[0.0], np.cumsum(np.where(defined, x, 0.0))])
    counts = np.concatenate([[0], np.cumsum(defined)])
    ends = np.arange(1, x.size + 1)
    starts = np.maximum(ends - max(1, window), 0)
    held = counts[ends] - counts[starts]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(held > 0, (sums[ends] - sums[starts]) / held, np.nan)


def scott_bandwidth(values: Sequence[float], fallback: float = 0.05) -> float:
    """Scott's rule h = sd * n^(-1/5) (sd with ddof = 1), as scipy's gaussian_kde default.

    With fewer than two distinct values the spread is unknown and `fallback` is returned (the
    default 0.05 suits the [0, 1] scale of relative positions; pass one in the data's units).
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2 or float(np.std(x)) == 0.0:
        return fallback
    return float(np.std(x, ddof=1) * x.size ** (-1 / 5))


def gaussian_kde(
    values: Sequence[float],
    grid: Sequence[float],
    bandwidth: float | None = None,
    fallback: float = 0.05,
) -> np.ndarray:
    """Gaussian kernel density estimate of `values` evaluated on `grid`.

    density(g) = 1/(n h) * sum_i phi((g - x_i) / h), phi the standard normal density, so the
    estimate integrates to 1 over the real line. `bandwidth` h defaults to Scott's rule
    (`scott_bandwidth`). Returns float64 [len(grid)]; zeros when `values` is empty.
    """
    x = np.asarray(values, dtype=float)
    g = np.asarray(grid, dtype=float)
    if x.size == 0:
        return np.zeros_like(g)
    h = scott_bandwidth(x, fallback) if bandwidth is None else float(bandwidth)
    if h <= 0:
        raise ValueError(f"KDE bandwidth must be > 0, got {h}")
    z = (g[:, None] - x[None, :]) / h
    return np.exp(-0.5 * z**2).sum(axis=1) / (x.size * h * np.sqrt(2 * np.pi))
