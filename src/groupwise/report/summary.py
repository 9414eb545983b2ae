"""A finished training run in a few lines, several in one table: what the policy learned on
held-out problems and what each method did to get there (`groupwise report RUN...` prints the
table; `groupwise train` prints a run's lines at its end).

From RUN/metrics.jsonl, RUN/heldout.jsonl (groupwise.train.heldout) and RUN/config.yaml, read
by groupwise.run_reader:

- held-out accuracy before training and after the last step, their difference and its 95 %
  interval (paired percentile bootstrap over problems, groupwise.metrics.mean_interval);
- the shares of mixed / all-correct / all-wrong groups (GRPO learns from mixed groups only);
- the all-wrong groups that got a gradient, as a share of all-wrong groups (LENS: about all of
  them; GRPO and AMIR-GRPO: none, docs/algorithms.md §3);
- AMIR-GRPO's pairs per group and lambda_reg, first and last step and the share of steps at
  its floor (docs/algorithms.md §2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from groupwise.run_reader import (
    CONFIG_FILE,
    METRICS_FILE,
    is_number,
    read_config,
    read_heldout,
    read_metrics,
)

if TYPE_CHECKING:
    from groupwise.metrics import Difference

__all__ = [
    "RunSummary",
    "comparison_table",
    "heldout_line",
    "method_label",
    "run_labels",
    "summarize",
    "summary_text",
    "versus",
]

# What summarize reads of every metrics.jsonl row, and what it reads where a row has it.
NEEDED = ("step", "seconds_step", "reward_mean", "group_mixed", "group_all_correct")
NEEDED += ("group_all_wrong",)
OPTIONAL = ("seconds_heldout", "group_all_wrong_active", "lambda", "pairs_per_group")
OPTIONAL += ("answers_unparsed", "answers_timeout", "answers_error")


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
    # The last held-out evaluation: each problem's id (where logged) and correct count.
    final_problems: tuple[str, ...] = ()
    final_correct: tuple[int, ...] = ()


def training_rows(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's rows with the NEEDED (and present OPTIONAL) keys finite numbers; a
    folder without it is not a training run."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; is {run_dir} a training run folder?")
    return read_metrics(path, NEEDED, OPTIONAL)


def _algorithm(run_dir: Path) -> dict[str, Any]:
    """The algorithm section of RUN/config.yaml; no config, or not a training config: an error
    naming it."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; is {run_dir} a training run folder?")
    config = read_config(run_dir)
    if not isinstance(config, dict) or not isinstance(config.get("algorithm", {}), dict):
        raise ValueError(f"{path}: is not a groupwise training config")
    return config.get("algorithm", {})


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return float(np.mean([row[key] for row in rows]))


def summarize(run_dir: str | Path) -> RunSummary:
    """The summary of the run in `run_dir` (complete or not: the last logged step counts as
    the end)."""
    from groupwise.metrics import accuracy_difference

    run_dir = Path(run_dir)
    rows = training_rows(run_dir)
    if not rows:
        raise ValueError(f"{run_dir / METRICS_FILE}: no step logged yet")
    algorithm = _algorithm(run_dir)
    evaluations = read_heldout(run_dir)
    heldout = None
    if len(evaluations) >= 2 and evaluations[0]["step"] == 0:
        first, last = evaluations[0], evaluations[-1]
        heldout = accuracy_difference(first["correct"], last["correct"], first["n"])
    all_wrong = sum(row["group_all_wrong"] for row in rows)
    with_gradient = [row.get("group_all_wrong_active") for row in rows]
    lambdas = [row["lambda"] for row in rows if "lambda" in row]
    pairs = [row["pairs_per_group"] for row in rows if "pairs_per_group" in row]
    floor = algorithm.get("lambda_min") if is_number(algorithm.get("lambda_min")) else None
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
        pairs_per_group=float(np.mean(pairs)) if lambdas and pairs else None,
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
        final_problems=tuple(evaluations[-1].get("problem_ids", ())) if evaluations else (),
        final_correct=tuple(evaluations[-1]["correct"]) if heldout else (),
    )


def versus(reference: RunSummary, other: RunSummary) -> Difference | None:
    """`other`'s final held-out accuracy minus `reference`'s, paired problem by problem, with
    its 95 % interval (groupwise.metrics.accuracy_difference); None unless both runs
    were evaluated before and after on the same problems with the same samples per problem.
    Runs of one config and seed also share each problem's sampling seed, so the difference is
    the policies'."""
    from groupwise.metrics import accuracy_difference

    same = (
        reference.heldout is not None
        and other.heldout is not None
        and reference.heldout_samples == other.heldout_samples
        and len(reference.final_correct) == len(other.final_correct)
        and reference.final_problems == other.final_problems
    )
    if not same:
        return None
    return accuracy_difference(
        reference.final_correct, other.final_correct, reference.heldout_samples
    )


def signed_points(fraction: float) -> str:
    """A difference of accuracies (fractions) as signed points with one decimal: '+4.5'."""
    # A bootstrap bound that is zero up to float error (-1e-18) would otherwise print "-0.0".
    return f"{round(100 * fraction, 1) + 0.0:+.1f}"


def heldout_line(summary: RunSummary) -> str:
    """'21.9 % -> 30.1 %, +8.2 points [95 % CI +5.9, +10.5]' or a note why there is none."""
    d = summary.heldout
    if d is None:
        return "no held-out evaluation before and after training (train.eval_every)"
    return (
        f"{100 * d.before:.1f} % -> {100 * d.after:.1f} %, {signed_points(d.delta)} points "
        f"[95 % CI {signed_points(d.low)}, {signed_points(d.high)}]"
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


def comparison_table(summaries: Sequence[RunSummary], labels: Sequence[str] = ()) -> str:
    """One markdown row per run (named by `labels`, by default `run_labels`): held-out
    accuracy before, after, the difference and its interval, the group shares and each
    method's own signal; with several runs also each run's final accuracy against the first
    run's, paired over problems (`versus`)."""
    labels = list(labels or run_labels(summaries))
    compared = len(summaries) > 1
    header = "| method | held-out before | after | difference [95 % CI] | "
    if compared:
        header += f"after vs {labels[0]} [95 % CI] | "
    header += (
        "groups mixed / all-correct / all-wrong | all-wrong groups with a gradient | "
        "AMIR pairs per group | lambda first -> last |"
    )
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for s, label in zip(summaries, labels, strict=True):
        held = [_interval_cell(s.heldout, before_after=True)]
        if compared:
            held.append("–" if s is summaries[0] else _interval_cell(versus(summaries[0], s)))
        lam = f"{s.lambda_first:.4f} -> {s.lambda_last:.4f}" if s.lambda_first is not None else "–"
        cells = [
            label,
            *held,
            f"{s.mixed:.0%} / {s.all_correct:.0%} / {s.all_wrong:.0%}",
            _cell(s.all_wrong_with_gradient, ".1%"),
            _cell(s.pairs_per_group, ".1f"),
            lam,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _interval_cell(d: Difference | None, before_after: bool = False) -> str:
    """'+8.2 [+5.9, +10.5]' (points); with before_after the two accuracies first, as three
    cells; '–' for each where there is no difference."""
    if d is None:
        return " | ".join(["–"] * (3 if before_after else 1))
    delta = f"{signed_points(d.delta)} [{signed_points(d.low)}, {signed_points(d.high)}]"
    if before_after:
        return f"{100 * d.before:.1f} % | {100 * d.after:.1f} % | {delta}"
    return delta
