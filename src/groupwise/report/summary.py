"""A finished training run in a few lines, several in one table: what the policy learned on
held-out problems, what it cost and what each method did to get there (`groupwise report
RUN...` prints the table; `groupwise train` prints a run's lines at its end).

From RUN/metrics.jsonl, RUN/heldout.jsonl (groupwise.train.heldout) and RUN/config.yaml, read
by groupwise.run_reader:

- the method, named after every option that changes it (`method_label`: "RLOO",
  "GRPO + dynamic sampling", "LENS + overlong penalty", ...);
- held-out accuracy before training and after the last step, their difference and its 95 %
  interval (paired percentile bootstrap over problems, groupwise.metrics.mean_interval); with
  several runs each run's final accuracy against the first run's, paired problem by problem
  only where both runs' step-0 evaluations agree (`not_paired`: else the table marks the run
  NOT_PAIRED and leaves the interval out, and `unpaired_warning` is one line for stderr);
- the completions sampled (dynamic sampling's dropped groups included);
- the shares of mixed / all-correct / all-wrong groups (with dynamic sampling: of the groups
  kept, and the dropped ones as shares of the groups sampled), and which groups the method
  learns from (`groups_remark`: GRPO from mixed groups only when correctness is the whole
  reward);
- the all-wrong groups that got a gradient (a non-zero advantage), as a share of all-wrong
  groups (LENS: about all of them; GRPO and AMIR-GRPO: none with a correctness reward,
  docs/algorithms.md §3; any method where other reward parts, as the overlong penalty, differ
  inside them);
- AMIR-GRPO's pairs per group and lambda_reg, first and last step and the share of steps at
  its floor (docs/algorithms.md §2).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from groupwise.report.methods import (
    all_wrong_remark,
    groups_remark,
    method_label,
    plural,
    section,
)
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
    "NOT_PAIRED",
    "RunSummary",
    "comparison_table",
    "heldout_line",
    "method_label",
    "not_paired",
    "plural",
    "run_labels",
    "summarize",
    "summary_text",
    "unpaired_warning",
    "versus",
]

# What summarize reads of every metrics.jsonl row, and what it reads where a row has it.
NEEDED = ("step", "seconds_step", "reward_mean", "group_mixed", "group_all_correct")
NEEDED += ("group_all_wrong",)
OPTIONAL = ("seconds_heldout", "group_all_wrong_active", "lambda", "pairs_per_group")
OPTIONAL += ("answers_unparsed", "answers_timeout", "answers_error", "completions_sampled")
OPTIONAL += ("groups_kept", "groups_dropped_all_correct", "groups_dropped_all_wrong")
OPTIONAL += ("groups_dropped_mixed",)
GROUP_KINDS = ("all_correct", "all_wrong", "mixed")


@dataclass(frozen=True)
class RunSummary:
    """What `summarize` reads of one run. Shares are fractions; None where the run has no
    such number (no held-out evaluation, no AMIR). Times in seconds."""

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
    # The step-0 evaluation's correct counts: runs that sampled alike have equal ones.
    first_correct: tuple[int, ...] = ()
    # Whether seconds_heldout includes the step-0 evaluation (heldout.jsonl's "seconds").
    heldout_timed_from_start: bool = False
    # Completions sampled over the run (dynamic sampling's dropped groups included); None
    # where neither metrics.jsonl nor the config says.
    completions_sampled: int | None = None
    # Dynamic sampling: the sampled groups dropped, as fractions of the groups sampled.
    dropped_all_correct: float | None = None
    dropped_all_wrong: float | None = None
    dropped_mixed: float | None = None
    # What the method learns from, and why all_wrong_with_gradient is what it is (text).
    groups_remark: str = ""
    all_wrong_remark: str = ""
    # Settings that decide the held-out samples: (option, value) pairs from config.yaml.
    sampling: tuple[tuple[str, str], ...] = ()

    @property
    def dynamic_sampling(self) -> bool:
        """Whether the run dropped groups (its group shares are of the kept groups)."""
        return self.dropped_all_correct is not None


def training_rows(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's rows with the NEEDED (and present OPTIONAL) keys finite numbers; a
    folder without it is not a training run."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; is {run_dir} a training run folder?")
    return read_metrics(path, NEEDED, OPTIONAL)


def read_training_config(run_dir: Path) -> dict[str, Any]:
    """RUN/config.yaml as read; no config, or not a training config: an error naming it."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; is {run_dir} a training run folder?")
    config = read_config(run_dir)
    if not isinstance(config, dict) or not isinstance(config.get("algorithm", {}), dict):
        raise ValueError(f"{path}: is not a groupwise training config")
    return config


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return float(np.mean([row[key] for row in rows]))


# Settings that decide a held-out evaluation's samples, (section, option): runs that differ
# in one do not share their step-0 samples.
SAMPLING_SETTINGS = (
    ("model", "name"),
    ("rollout", "engine"),
    ("rollout", "temperature"),
    ("rollout", "top_p"),
    ("rollout", "max_new_tokens"),
    ("data", "prompt"),
    ("data", "heldout"),
    ("train", "seed"),
    ("train", "eval_samples"),
)


def summarize(run_dir: str | Path) -> RunSummary:
    """The summary of the run in `run_dir` (complete or not: the last logged step counts as
    the end)."""
    run_dir = Path(run_dir)
    rows = training_rows(run_dir)
    if not rows:
        raise ValueError(f"{run_dir / METRICS_FILE}: no step logged yet")
    config = read_training_config(run_dir)
    algorithm = section(config, "algorithm")
    all_wrong = sum(row["group_all_wrong"] for row in rows)
    with_gradient = [row.get("group_all_wrong_active") for row in rows]
    share = sum(with_gradient) / all_wrong if all_wrong > 0 and None not in with_gradient else None
    lambdas = [row["lambda"] for row in rows if "lambda" in row]
    pairs = [row["pairs_per_group"] for row in rows if "pairs_per_group" in row]
    floor = algorithm.get("lambda_min") if is_number(algorithm.get("lambda_min")) else None
    return RunSummary(
        path=run_dir,
        label=method_label(config),
        steps=int(rows[-1]["step"]),
        seconds_training=sum(row["seconds_step"] for row in rows),
        mixed=_mean(rows, "group_mixed"),
        all_correct=_mean(rows, "group_all_correct"),
        all_wrong=all_wrong / len(rows),
        all_wrong_with_gradient=share,
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
        groups_remark=groups_remark(config),
        all_wrong_remark=all_wrong_remark(config, share) if share is not None else "",
        sampling=tuple(
            (f"{s}.{k}", _setting_text(section(config, s)[k]))
            for s, k in SAMPLING_SETTINGS
            if k in section(config, s)
        ),
        **_heldout_fields(run_dir, rows),
        **_sampled_fields(config, rows),
    )


def _setting_text(value: Any) -> str:
    """A setting's value as the table says it: a text as it is, else its JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _heldout_fields(run_dir: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """RunSummary's held-out fields from RUN/heldout.jsonl: the difference of the last
    evaluation to step 0's, the problems, samples, step 0's and the last counts, and the time
    spent: every evaluation's "seconds" where heldout.jsonl has them (step 0 included), else
    metrics.jsonl's seconds_heldout, which the trainer logs for the evaluations after a step
    only."""
    from groupwise.metrics import accuracy_difference

    evaluations = read_heldout(run_dir)
    heldout = None
    if len(evaluations) >= 2 and evaluations[0]["step"] == 0:
        first, last = evaluations[0], evaluations[-1]
        heldout = accuracy_difference(first["correct"], last["correct"], first["n"])
    timed = bool(evaluations) and all(is_number(e.get("seconds")) for e in evaluations)
    return {
        "heldout": heldout,
        "heldout_problems": len(evaluations[0]["correct"]) if evaluations else 0,
        "heldout_samples": int(evaluations[0]["n"]) if evaluations else 0,
        "final_problems": tuple(evaluations[-1].get("problem_ids", ())) if evaluations else (),
        "final_correct": tuple(evaluations[-1]["correct"]) if heldout else (),
        "first_correct": tuple(evaluations[0]["correct"]) if heldout else (),
        "seconds_heldout": (
            sum(e["seconds"] for e in evaluations)
            if timed
            else sum(row.get("seconds_heldout", 0.0) for row in rows)
        ),
        "heldout_timed_from_start": timed and evaluations[0]["step"] == 0,
    }


def _sampled_fields(config: Mapping[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """RunSummary's completions_sampled (metrics.jsonl's, summed over steps; else group_size x
    questions_per_step per step, without dynamic sampling) and, with dynamic sampling, the
    dropped groups' shares of the groups sampled (groups_kept + groups_dropped_<kind> where
    logged, else completions_sampled / group_size)."""
    rollout = section(config, "rollout")
    size, questions = rollout.get("group_size"), rollout.get("questions_per_step")
    if all("completions_sampled" in row for row in rows):
        sampled: int | None = sum(int(row["completions_sampled"]) for row in rows)
    elif not rollout.get("dynamic_sampling") and is_number(size) and is_number(questions):
        sampled = int(size * questions * len(rows))
    else:
        sampled = None
    fields: dict[str, Any] = {"completions_sampled": sampled}
    if not rollout.get("dynamic_sampling"):
        return fields
    dropped = {k: sum(row.get(f"groups_dropped_{k}", 0) for row in rows) for k in GROUP_KINDS}
    if all("groups_kept" in row for row in rows):
        groups = sum(row["groups_kept"] for row in rows) + sum(dropped.values())
    else:
        groups = sampled / size if sampled and is_number(size) and size > 0 else 0
    if groups > 0:
        fields.update({f"dropped_{kind}": count / groups for kind, count in dropped.items()})
    return fields


def versus(reference: RunSummary, other: RunSummary) -> Difference | None:
    """`other`'s final held-out accuracy minus `reference`'s, paired problem by problem, with
    its 95 % interval (groupwise.metrics.accuracy_difference); None unless both runs were
    evaluated before and after on the same problems with the same samples per problem and their
    step-0 evaluations agree (`not_paired`). Runs of one config and seed share each problem's
    sampling seed, so their step-0 samples are the same and the difference is the policies'."""
    from groupwise.metrics import accuracy_difference

    same = (
        reference.heldout is not None
        and other.heldout is not None
        and reference.heldout_samples == other.heldout_samples
        and len(reference.final_correct) == len(other.final_correct)
        and reference.final_problems == other.final_problems
        and not_paired(reference, other) is None
    )
    if not same:
        return None
    return accuracy_difference(
        reference.final_correct, other.final_correct, reference.heldout_samples
    )


def not_paired(reference: RunSummary, other: RunSummary) -> str | None:
    """Why the two runs' held-out evaluations are not paired although they share problems and
    samples per problem: their step-0 evaluations (the same base policy) differ problem by
    problem, so they did not draw the same samples (another engine, seed, model or sampling
    setting). The reason names both step-0 accuracies and the settings that differ, e.g.
    "step 0 15.0 % vs 10.0 %, rollout.engine "transformers" vs "vllm""; None when the step-0
    counts agree, or when there is nothing to pair."""
    a, b = reference, other
    if a.heldout is None or b.heldout is None or a.heldout_samples != b.heldout_samples:
        return None
    if a.final_problems != b.final_problems or len(a.first_correct) != len(b.first_correct):
        return None
    if a.first_correct == b.first_correct:
        return None
    settings, theirs = dict(a.sampling), dict(b.sampling)
    differ = [
        f"{key} {value} vs {theirs[key]}"
        for key, value in settings.items()
        if key in theirs and theirs[key] != value
    ]
    return ", ".join(
        [f"step 0 {100 * a.heldout.before:.1f} % vs {100 * b.heldout.before:.1f} %", *differ]
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
    lines = [_time_line(s), "  " + _heldout_text(s), "  " + _groups_text(s)]
    if s.all_wrong_with_gradient is not None:
        lines.append(
            "  all-wrong groups that got a gradient (a non-zero advantage): "
            f"{s.all_wrong_with_gradient:.1%} of them ({s.all_wrong_remark})"
        )
    if s.pairs_per_group is not None:
        lines.append(
            f"  AMIR-GRPO: {s.pairs_per_group:.1f} preference pairs per group; lambda "
            f"{s.lambda_first:.4f} -> {s.lambda_last:.4f}, at its floor in "
            f"{s.lambda_at_floor:.0%} of steps"
        )
    if s.answers_unparsed or s.answers_timeout or s.answers_error:
        lines.append(
            f"  answer checking: {plural(s.answers_unparsed, 'answer')} compared as text "
            f"(math-verify could not parse them), {s.answers_timeout} timed out, "
            f"{s.answers_error} errored"
        )
    return "\n".join(lines)


def _time_line(s: RunSummary) -> str:
    """'GRPO: 50 steps, 6,400 completions sampled, 9.1 min of training + 4.2 min of held-out
    evaluation (step 0 included)'."""
    line = f"{s.label}: {plural(s.steps, 'step')}"
    if s.completions_sampled is not None:
        line += f", {plural(s.completions_sampled, 'completion')} sampled"
    line += f", {s.seconds_training / 60:.1f} min of training"
    if s.heldout is not None:
        line += f" + {s.seconds_heldout / 60:.1f} min of held-out evaluation " + (
            "(step 0 included)"
            if s.heldout_timed_from_start
            else "(after steps only: the run did not log the step-0 evaluation's time)"
        )
    return line


def _heldout_text(s: RunSummary) -> str:
    """'held-out accuracy (200 problems x 4 samples): 21.9 % -> ...' or why there is none."""
    if s.heldout is None:
        return heldout_line(s)
    size = f"{plural(s.heldout_problems, 'problem')} x {plural(s.heldout_samples, 'sample')}"
    return f"held-out accuracy ({size}): {heldout_line(s)}"


def _groups_text(s: RunSummary) -> str:
    """The group shares (of the groups trained on, with dynamic sampling also the groups it
    dropped, of those sampled) and what the method learns from."""
    what = "groups trained on (kept)" if s.dynamic_sampling else "groups"
    text = (
        f"{what}, mean over steps: mixed {s.mixed:.0%}, all-correct {s.all_correct:.0%}, "
        f"all-wrong {s.all_wrong:.0%}"
    )
    if s.dynamic_sampling:
        dropped = (s.dropped_all_correct or 0) + (s.dropped_all_wrong or 0) + (s.dropped_mixed or 0)
        text += (
            f"; of the groups sampled, dynamic sampling dropped {dropped:.0%} (all-correct "
            f"{s.dropped_all_correct:.0%}, all-wrong {s.dropped_all_wrong:.0%}"
            + (f", mixed {s.dropped_mixed:.0%}" if s.dropped_mixed else "")
            + ")"
        )
    return text + (f" ({s.groups_remark})" if s.groups_remark else "")


def _cell(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def run_labels(summaries: Sequence[RunSummary]) -> list[str]:
    """Each run's name in tables and legends: its method, and its folder beside it when
    another run shares the method ("LENS (lens-a)", "LENS (lens-b)")."""
    methods = [s.label for s in summaries]
    return [
        f"{s.label} ({s.path.name})" if methods.count(s.label) > 1 else s.label for s in summaries
    ]


# The table's cell for a run whose step-0 evaluation differs from the first run's.
NOT_PAIRED = "⚠ not paired: step-0 samples differ"


def comparison_table(summaries: Sequence[RunSummary], labels: Sequence[str] = ()) -> str:
    """One markdown row per run (named by `labels`, by default `run_labels`): held-out
    accuracy before, after, the difference and its interval, the group shares (with dynamic
    sampling: of the groups kept) and each method's own signal; with several runs also each
    run's final accuracy against the first run's, paired over problems (`versus`), or
    NOT_PAIRED where their step-0 evaluations differ (`not_paired`: the interval is left out,
    and `unpaired_warning` says why). The completions each run sampled are a column beside the
    accuracies where they differ between the runs (or a run used dynamic sampling), so that a
    gain bought with more samples shows its cost; where every run sampled as many, one line
    under the table says how many ("completions sampled: 6,400 by each run")."""
    labels = list(labels or run_labels(summaries))
    compared = len(summaries) > 1
    counts = {s.completions_sampled for s in summaries}
    by_run = len(counts) > 1 or any(s.dynamic_sampling for s in summaries)
    header = "| method | held-out before | after | difference [95 % CI] | "
    if compared:
        header += f"after vs {labels[0]} [95 % CI] | "
    header += "completions sampled | " if by_run else ""
    header += (
        "groups mixed / all-correct / all-wrong | all-wrong groups with a gradient | "
        "AMIR pairs per group | lambda first -> last |"
    )
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for s, label in zip(summaries, labels, strict=True):
        cells = [label, _interval_cell(s.heldout, before_after=True)]
        cells += [_versus_cell(summaries[0], s)] if compared else []
        cells += [_cell(s.completions_sampled, ",")] if by_run else []
        lam = f"{s.lambda_first:.4f} -> {s.lambda_last:.4f}" if s.lambda_first is not None else "–"
        cells += [
            f"{s.mixed:.0%} / {s.all_correct:.0%} / {s.all_wrong:.0%}"
            + (" (kept)" if s.dynamic_sampling else ""),
            _cell(s.all_wrong_with_gradient, ".1%"),
            _cell(s.pairs_per_group, ".1f"),
            lam,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if not by_run and None not in counts:
        (count,) = counts
        lines.append(f"\ncompletions sampled: {count:,} by {'each' if compared else 'the'} run")
    return "\n".join(lines)


def _versus_cell(reference: RunSummary, other: RunSummary) -> str:
    if other is reference:
        return "–"
    return NOT_PAIRED if not_paired(reference, other) else _interval_cell(versus(reference, other))


def unpaired_warning(summaries: Sequence[RunSummary], labels: Sequence[str] = ()) -> str | None:
    """One line naming each run whose step-0 held-out evaluation differs from the first run's
    (`not_paired`) and why; None when there is none."""
    labels = list(labels or run_labels(summaries))
    reasons = [
        f"{label}: {reason}"
        for s, label in zip(summaries[1:], labels[1:], strict=True)
        if (reason := not_paired(summaries[0], s))
    ]
    if not reasons:
        return None
    return (
        f"warning: not paired with {labels[0]}, whose step-0 held-out evaluation differs, so "
        f"the runs did not sample alike ('after vs {labels[0]}' left out): " + "; ".join(reasons)
    )


def _interval_cell(d: Difference | None, before_after: bool = False) -> str:
    """'+8.2 [+5.9, +10.5]' (points); with before_after the two accuracies first, as three
    cells; '–' for each where there is no difference."""
    if d is None:
        return " | ".join(["–"] * (3 if before_after else 1))
    delta = f"{signed_points(d.delta)} [{signed_points(d.low)}, {signed_points(d.high)}]"
    if before_after:
        return f"{100 * d.before:.1f} % | {100 * d.after:.1f} % | {delta}"
    return delta
