"""A finished run in a few lines, several runs in one table and one figure: what the policy
learned on held-out problems and what each method did to get there.

From RUN/metrics.jsonl, RUN/heldout.jsonl (groupwise.train.heldout) and RUN/config.yaml:

- held-out accuracy before training and after the last step, their difference and its 95 %
  interval (paired percentile bootstrap over problems);
- the shares of mixed / all-correct / all-wrong groups (GRPO learns from mixed groups only);
- the all-wrong groups that got a gradient, as a share of all-wrong groups (LENS: about all of
  them; GRPO and AMIR-GRPO: none, docs/algorithms.md §3);
- AMIR-GRPO's pairs per group and lambda_reg, first and last step and the share of steps at
  its floor (docs/algorithms.md §2).

    groupwise summary runs/a runs/b [--png runs/compare.png]
    (or python -m groupwise.train.summary ...)

prints the comparison table (and each run's lines with --each; runs that share a method are
named by folder too) and draws reward and held-out accuracy over steps. `plot_run` draws one
run's own figure, RUN/run.png, which `groupwise train` writes at its end.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from groupwise.entry import main_of
from groupwise.records import read_jsonl
from groupwise.train.heldout import Difference, accuracy_difference, mean_interval, read_heldout
from groupwise.train.metrics_log import METRICS_FILE

__all__ = [
    "RunSummary",
    "add_arguments",
    "comparison_table",
    "main",
    "method_label",
    "plot_run",
    "plot_runs",
    "run",
    "run_labels",
    "summarize",
]

# Moving-average window (steps) of the reward curve in the figure.
SMOOTHING = 10


def method_label(algorithm: dict[str, Any]) -> str:
    """The method a run's algorithm section configures: GRPO, GSPO, AMIR-GRPO, LENS, or
    AMIR-GRPO + LENS."""
    name = "GSPO" if algorithm.get("loss_level") == "sequence" else "GRPO"
    if algorithm.get("amir"):
        name = "AMIR-" + name
    if algorithm.get("advantage") == "lens":
        name = f"{name} + LENS" if algorithm.get("amir") else "LENS"
    return name


@dataclass(frozen=True)
class RunSummary:
    """What `summarize` reads of one run. Shares are fractions; None where the run has no
    such number (no held-out evaluation, no AMIR)."""

    path: Path
    label: str
    steps: int
    seconds_training: float
    seconds_heldout: float
    heldout: Difference | None
    heldout_problems: int
    heldout_samples: int
    mixed: float
    all_correct: float
    all_wrong: float
    all_wrong_with_gradient: float | None
    pairs_per_group: float | None
    lambda_first: float | None
    lambda_last: float | None
    lambda_at_floor: float | None
    answers_unparsed: int = 0
    answers_timeout: int = 0
    answers_error: int = 0


# What summarize reads of every metrics.jsonl row, and what it reads where a row has it.
_NEEDED = ("step", "seconds_step", "reward_mean", "group_mixed", "group_all_correct")
_NEEDED += ("group_all_wrong",)
_OPTIONAL = ("seconds_heldout", "group_all_wrong_active", "lambda", "pairs_per_group")
_OPTIONAL += ("answers_unparsed", "answers_timeout", "answers_error")


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's rows; a row that is no object of finite numbers under the keys summarize
    reads is a ValueError naming the file and line."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; is {run_dir} a training run folder?")
    rows, _ = read_jsonl(path)
    for number, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        for key in (*_NEEDED, *(k for k in _OPTIONAL if row.get(k) is not None)):
            if not _is_number(row.get(key)):
                raise ValueError(
                    f"{path}:{number}: {key} must be a finite number, got {row.get(key)!r}"
                )
    return [row for _, row in rows]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _heldout(run_dir: Path) -> list[dict[str, Any]]:
    """read_heldout's evaluations, each with an integer step, n >= 1 and one correct count in
    [0, n] per problem; else a ValueError naming heldout.jsonl."""
    evaluations = read_heldout(run_dir)
    for e in evaluations:
        n, correct = e["n"], e["correct"]
        valid = isinstance(n, int) and n >= 1 and isinstance(correct, list) and correct
        if not (valid and isinstance(e["step"], int) and all(_is_number(c) for c in correct)):
            raise ValueError(
                f"{run_dir / 'heldout.jsonl'}: the evaluation of step {e['step']!r} is not an "
                "integer step, n >= 1 and a non-empty list of correct counts"
            )
    return evaluations


def _config(run_dir: Path) -> dict[str, Any]:
    """RUN/config.yaml as a mapping; unreadable, or not a mapping: a ValueError naming it."""
    path = run_dir / "config.yaml"
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: cannot be read ({' '.join(str(error).split())})") from None
    if not isinstance(config, dict) or not isinstance(config.get("algorithm", {}), dict):
        raise ValueError(f"{path}: is not a groupwise training config")
    return config


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return float(np.mean([row[key] for row in rows]))


def summarize(run_dir: str | Path) -> RunSummary:
    """The summary of the run in `run_dir` (complete or not: the last logged step counts as
    the end)."""
    run_dir = Path(run_dir)
    rows = _metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir / METRICS_FILE}: no step logged yet")
    algorithm = _config(run_dir).get("algorithm", {})
    evaluations = _heldout(run_dir)
    heldout = None
    if len(evaluations) >= 2 and evaluations[0]["step"] == 0:
        first, last = evaluations[0], evaluations[-1]
        heldout = accuracy_difference(first["correct"], last["correct"], first["n"])
    all_wrong = sum(row["group_all_wrong"] for row in rows)
    with_gradient = [row.get("group_all_wrong_active") for row in rows]
    lambdas = [row["lambda"] for row in rows if "lambda" in row]
    floor = algorithm.get("lambda_min") if _is_number(algorithm.get("lambda_min")) else None
    return RunSummary(
        path=run_dir,
        label=method_label(algorithm),
        steps=int(rows[-1]["step"]),
        seconds_training=sum(row["seconds_step"] for row in rows),
        seconds_heldout=sum(row.get("seconds_heldout", 0.0) for row in rows),
        heldout=heldout,
        heldout_problems=len(evaluations[0]["correct"]) if evaluations else 0,
        heldout_samples=int(evaluations[0]["n"]) if evaluations else 0,
        mixed=_mean(rows, "group_mixed"),
        all_correct=_mean(rows, "group_all_correct"),
        all_wrong=all_wrong / len(rows),
        all_wrong_with_gradient=(
            sum(with_gradient) / all_wrong if all_wrong > 0 and None not in with_gradient else None
        ),
        pairs_per_group=_mean(rows, "pairs_per_group") if lambdas else None,
        lambda_first=lambdas[0] if lambdas else None,
        lambda_last=lambdas[-1] if lambdas else None,
        lambda_at_floor=(
            sum(math.isclose(value, floor) for value in lambdas) / len(lambdas)
            if lambdas and floor is not None
            else None
        ),
        answers_unparsed=sum(int(row.get("answers_unparsed", 0)) for row in rows),
        answers_timeout=sum(int(row.get("answers_timeout", 0)) for row in rows),
        answers_error=sum(int(row.get("answers_error", 0)) for row in rows),
    )


def _points(value: float) -> str:
    return f"{100 * value:+.1f}"


def heldout_line(summary: RunSummary) -> str:
    """'21.9 % -> 30.1 %, +8.2 points [95 % CI +5.9, +10.5]' or a note why there is none."""
    d = summary.heldout
    if d is None:
        return "no held-out evaluation before and after training (train.eval_every)"
    return (
        f"{100 * d.before:.1f} % -> {100 * d.after:.1f} %, {_points(d.delta)} points "
        f"[95 % CI {_points(d.low)}, {_points(d.high)}]"
    )


def summary_text(summary: RunSummary) -> str:
    """Each run's lines, as `groupwise train` prints them at its end."""
    s = summary
    lines = [
        f"{s.label}: {s.steps} steps, {s.seconds_training / 60:.1f} min of training"
        + (f" + {s.seconds_heldout / 60:.1f} min of held-out evaluation" if s.heldout else ""),
        f"  held-out accuracy ({s.heldout_problems} problems x {s.heldout_samples} samples): "
        + heldout_line(s)
        if s.heldout
        else "  " + heldout_line(s),
        f"  groups, mean over steps: mixed {s.mixed:.0%}, all-correct {s.all_correct:.0%}, "
        f"all-wrong {s.all_wrong:.0%} (GRPO learns from mixed groups only)",
    ]
    if s.all_wrong_with_gradient is not None:
        lines.append(
            f"  all-wrong groups that got a gradient: {s.all_wrong_with_gradient:.1%} of them"
            + (" (LENS's calibrated negatives)" if "LENS" in s.label else " (advantage 0)")
        )
    if s.pairs_per_group is not None:
        lines.append(
            f"  AMIR-GRPO: {s.pairs_per_group:.1f} preference pairs per group; lambda "
            f"{s.lambda_first:.4f} -> {s.lambda_last:.4f}, at its floor in "
            f"{s.lambda_at_floor:.0%} of steps"
        )
    if s.answers_unparsed or s.answers_timeout or s.answers_error:
        lines.append(
            f"  answer checking: {s.answers_unparsed} answers compared as text (math-verify "
            f"could not parse them), {s.answers_timeout} timed out, {s.answers_error} errored"
        )
    return "\n".join(lines)


def _cell(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def run_labels(summaries: Sequence[RunSummary]) -> list[str]:
    """Each run's name in tables and legends: its method, and its folder beside it when
    another run shares the method ("LENS (lens-a)", "LENS (lens-b)")."""
    methods = [s.label for s in summaries]
    return [
        f"{s.label} ({s.path.name})" if methods.count(s.label) > 1 else s.label for s in summaries
    ]


def comparison_table(summaries: Sequence[RunSummary]) -> str:
    """One markdown row per run: held-out accuracy before, after, the difference and its
    interval, the group shares and each method's own signal."""
    header = (
        "| method | held-out before | after | difference [95 % CI] | groups mixed / "
        "all-correct / all-wrong | all-wrong groups with a gradient | AMIR pairs per group "
        "| lambda first -> last |"
    )
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for s, label in zip(summaries, run_labels(summaries), strict=True):
        d = s.heldout
        held = (
            [
                f"{100 * d.before:.1f} %",
                f"{100 * d.after:.1f} %",
                f"{_points(d.delta)} [{_points(d.low)}, {_points(d.high)}]",
            ]
            if d is not None
            else ["–", "–", "–"]
        )
        lam = f"{s.lambda_first:.4f} -> {s.lambda_last:.4f}" if s.lambda_first is not None else "–"
        lines.append(
            "| "
            + " | ".join(
                [
                    label,
                    *held,
                    f"{s.mixed:.0%} / {s.all_correct:.0%} / {s.all_wrong:.0%}",
                    _cell(s.all_wrong_with_gradient, ".1%"),
                    _cell(s.pairs_per_group, ".1f"),
                    lam,
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """[N] mean of each value and the window - 1 before it (fewer at the start)."""
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, values.size + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def plot_runs(run_dirs: Sequence[str | Path], path: str | Path) -> Path:
    """PNG of training reward (per step, faint, and its trailing mean over SMOOTHING steps) and
    held-out accuracy (each evaluation with its 95 % bootstrap interval over problems) over
    steps, one line per run, labelled by method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (reward_ax, heldout_ax) = plt.subplots(1, 2, figsize=(11, 4))
    run_dirs = [Path(run_dir) for run_dir in run_dirs]
    labels = run_labels([summarize(run_dir) for run_dir in run_dirs])
    for run_dir, label in zip(run_dirs, labels, strict=True):
        rows = _metrics(run_dir)
        steps = np.array([row["step"] for row in rows])
        reward = np.array([row["reward_mean"] for row in rows], dtype=np.float64)
        (line,) = reward_ax.plot(steps, trailing_mean(reward, SMOOTHING), label=label)
        reward_ax.plot(steps, reward, color=line.get_color(), alpha=0.2, linewidth=0.8)
        evaluations = read_heldout(run_dir)
        if evaluations:
            x = [e["step"] for e in evaluations]
            y, low, high = [], [], []
            for e in evaluations:
                per_problem = np.asarray(e["correct"], dtype=np.float64) / e["n"]
                interval = mean_interval(per_problem)
                y.append(100 * per_problem.mean())
                low.append(100 * interval[0])
                high.append(100 * interval[1])
            heldout_ax.plot(x, y, marker="o", color=line.get_color(), label=label)
            heldout_ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15)
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
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


RUN_FIGURE = "run.png"


def plot_run(run_dir: str | Path, path: str | Path | None = None) -> Path:
    """The figure of one run (RUN/run.png by default): the panels of what the run did, none of
    a term its method does not use. Always: training reward (and its trailing mean over
    SMOOTHING steps) and the group shares (mixed / all-correct / all-wrong); with held-out
    evaluations, held-out accuracy with its 95 % interval over problems; LENS: the share of
    all-wrong groups that got a gradient; AMIR-GRPO: pairs per group and lambda_reg."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    summary = summarize(run_dir)
    rows = _metrics(run_dir)
    evaluations = read_heldout(run_dir)
    panels = ["reward", *(["heldout"] if evaluations else []), "groups"]
    if "LENS" in summary.label:
        panels.append("all_wrong")
    if any("lambda" in row for row in rows):
        panels += ["pairs", "lambda"]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        if panel == "heldout":
            _draw_heldout(ax, evaluations)
        else:
            _draw_series(ax, panel, rows)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{summary.label}: {run_dir}", fontsize=10)
    fig.tight_layout()
    target = Path(path) if path is not None else run_dir / RUN_FIGURE
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


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
    """One panel of per-step metrics: reward (raw and trailing mean), group shares, or one of
    _SERIES_PANELS."""
    steps = np.array([row["step"] for row in rows])

    def series(key: str) -> np.ndarray:
        return np.array([row.get(key, np.nan) for row in rows], dtype=np.float64)

    if panel == "reward":
        reward = series("reward_mean")
        ax.plot(steps, reward, alpha=0.3, linewidth=0.8)
        ax.plot(steps, trailing_mean(reward, SMOOTHING), color="C0")
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


def _draw_heldout(ax: Any, evaluations: list[dict[str, Any]]) -> None:
    """Held-out accuracy at each evaluation, with its 95 % interval over problems."""
    x = [e["step"] for e in evaluations]
    per_problem = [np.asarray(e["correct"], dtype=np.float64) / e["n"] for e in evaluations]
    intervals = [mean_interval(p) for p in per_problem]
    ax.plot(x, [100 * p.mean() for p in per_problem], marker="o", color="C1")
    ax.fill_between(x, [100 * i[0] for i in intervals], [100 * i[1] for i in intervals], alpha=0.2)
    ax.set(title="held-out accuracy (95 % CI)", ylabel="accuracy (%)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`groupwise summary`'s arguments (also `python -m groupwise.train.summary`)."""
    parser.description = __doc__.splitlines()[0]
    parser.add_argument("runs", nargs="+", type=Path, help="training run folders")
    parser.add_argument("--png", type=Path, help="draw reward and held-out accuracy here")
    parser.add_argument("--each", action="store_true", help="also print each run's lines")


def run(args: argparse.Namespace) -> int:
    """Print the comparison table (each run's lines with --each), draw it with --png. A run
    folder that cannot be read, or a --png that names no .png file, raises: the entry point
    prints it as one line, exit status 2 (groupwise.entry)."""
    if args.png is not None and args.png.suffix.lower() != ".png":
        raise ValueError(f"--png {args.png}: the figure is a PNG file; name it NAME.png")
    summaries = [summarize(run) for run in args.runs]
    if args.each:
        for s in summaries:
            print(f"{s.path}: {summary_text(s)}\n")
    print(comparison_table(summaries))
    if args.png:
        print(f"figure: {plot_runs(args.runs, args.png)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m groupwise.train.summary`: `groupwise summary`, its errors one line too."""
    return main_of("python -m groupwise.train.summary", add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
