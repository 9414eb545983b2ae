"""The learning testbed's results (testbed/learning.py): per level, pass@k per method, each
method's difference to GRPO with its intervals (testbed/stats.py), held-out curves, the
LENS and AMIR-GRPO mechanisms per step, sentences computed from those numbers, and the figures;
written as learning.md, learning.json and learning*.png from the runs' summaries.
"""

from __future__ import annotations

import json
import math
import statistics
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .plan import (
    AMIR_METHODS,
    BASE,
    CONFIG,
    LENS_METHODS,
    METHODS,
    REFERENCE,
    BenchSettings,
    RunSpec,
    machine,
    train_overrides,
)
from .stats import difference_to_reference, paired_seed_interval

SMOOTH = 9  # steps of the moving average in the figures


def by_run(summaries: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[Mapping]]]:
    """{level: {method: [summaries sorted by seed]}}, methods in METHODS order, base first."""
    out: dict[str, dict[str, list[Mapping]]] = {}
    order = [BASE, *METHODS]
    for s in sorted(summaries, key=lambda s: (s["level"], order.index(s["method"]), s["seed"])):
        out.setdefault(s["level"], {}).setdefault(s["method"], []).append(s)
    return out


def per_problem_pass(summary: Mapping[str, Any], n: int, k: int) -> np.ndarray:
    """[P] pass@k of each held-out problem of one run's final evaluation."""
    from groupwise.metrics import pass_at_k

    return np.asarray(pass_at_k(n, np.asarray(summary["counts"]), k), dtype=float).reshape(-1)


def _edges(values: Sequence[float], fraction: float = 0.1) -> list[float]:
    """[mean of the first `fraction` of the values, mean of the last], NaNs ignored."""
    count = max(1, round(fraction * len(values)))
    return [float(np.nanmean(values[:count])), float(np.nanmean(values[-count:]))]


def aggregate(summaries: Sequence[Mapping[str, Any]], settings: BenchSettings) -> dict[str, Any]:
    """The numbers of the results file, per level: "table" (per method: seeds, pass@k per seed
    and their mean and sd in percent, training accuracy and all-wrong groups over the first
    and last 10 % of steps, minutes per run; the base row's pass@k_ci), "differences" (per
    method and k: difference_to_reference against GRPO, in points), "curve" (per method: the
    held-out pass@1 and margin per curve step, mean and sd over seeds), "lens" and "amir"
    (mechanism_numbers)."""
    out: dict[str, Any] = {}
    n, ks = settings.eval_n, settings.eval_ks
    grouped = by_run(summaries)
    for level in [lv for lv in settings.levels if lv in grouped]:
        methods = grouped[level]
        table: dict[str, Any] = {}
        for method, runs in methods.items():
            row: dict[str, Any] = {
                "label": "base policy" if method == BASE else METHODS[method].label,
                "seeds": [r["seed"] for r in runs],
                "minutes": statistics.fmean(
                    (r["seconds_train"] + r["seconds_eval"]) / 60 for r in runs
                ),
            }
            for k in ks:
                values = [100 * r["results"][f"pass@{k}"] for r in runs]
                row[f"pass@{k}"] = values
                row[f"pass@{k}_mean"] = statistics.fmean(values)
                row[f"pass@{k}_sd"] = statistics.stdev(values) if len(values) > 1 else 0.0
                if method == BASE:
                    row[f"pass@{k}_ci"] = [100 * x for x in runs[0]["results"][f"pass@{k}_ci"]]
            if method != BASE:
                for key, name in (("accuracy", "train_accuracy"), ("group_all_wrong", "all_wrong")):
                    edges = [_edges(r["steps"][key]) for r in runs]
                    row[name] = [statistics.fmean(e[i] for e in edges) for i in (0, 1)]
            table[method] = row
        out[level] = {
            "table": table,
            "differences": differences(methods, n, ks),
            "curve": curves(methods),
            **mechanism_numbers(methods),
        }
    return out


def differences(
    methods: Mapping[str, Sequence[Mapping]], n: int, ks: Sequence[int]
) -> dict[str, dict[str, dict[str, float]]]:
    """{method: {"pass@k": difference_to_reference (points)}} for every trained method other
    than GRPO, over the seeds both have."""
    if REFERENCE not in methods:
        return {}
    reference = {r["seed"]: r for r in methods[REFERENCE]}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for method, runs in methods.items():
        paired = [r for r in runs if r["seed"] in reference]
        if method in (BASE, REFERENCE) or not paired:
            continue
        out[method] = {}
        for k in ks:
            mine = np.stack([per_problem_pass(r, n, k) for r in paired])
            theirs = np.stack([per_problem_pass(reference[r["seed"]], n, k) for r in paired])
            diff = difference_to_reference(mine, theirs)
            out[method][f"pass@{k}"] = {
                key: 100 * value if key != "distinguishable" else value
                for key, value in diff.items()
            } | {"seeds": len(paired)}
    return out


def curves(methods: Mapping[str, Sequence[Mapping]]) -> dict[str, list[dict[str, Any]]]:
    """{method: [{"step", "pass@1", "pass@1_sd", "margin", "margin_sd"}]} over the curve steps
    (pass@1 in percent, margin in nats/token), each trained method starting from the base's
    step 0."""
    base = methods[BASE][0]["curve"] if BASE in methods else []
    out: dict[str, list[dict[str, Any]]] = {}
    for method, runs in methods.items():
        points = [[*base, *r["curve"]] if method != BASE else r["curve"] for r in runs]
        rows = []
        for i, point in enumerate(points[0]):
            at = [p[i] for p in points if len(p) > i]
            pass1 = [100 * p["pass@1"] for p in at]
            margin = [p["margin"] for p in at if p["margin"] is not None]
            rows.append(
                {
                    "step": point["step"],
                    "pass@1": statistics.fmean(pass1),
                    "pass@1_sd": statistics.stdev(pass1) if len(pass1) > 1 else 0.0,
                    "margin": statistics.fmean(margin) if margin else None,
                    "margin_sd": statistics.stdev(margin) if len(margin) > 1 else 0.0,
                    "margins": margin,
                }
            )
        out[method] = rows
    return out


def _ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    total = float(np.nansum(denominator))
    return float(np.nansum(numerator)) / total if total > 0 else math.nan


def mechanism_numbers(
    methods: Mapping[str, Sequence[Mapping]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """{"lens": {method: ...}, "amir": {method: ...}} from the per-step logs of every trained
    method. LENS (train.log_all_wrong_gradient): "all_wrong" (fraction of groups all-wrong),
    "active" (of those, the fraction with a non-zero advantage, pooled over steps; per seed and
    mean), "grad_share" (mean over steps of the all-wrong rows' share of the gradient norm; per
    seed, mean, and the first and last 10 % of steps). AMIR: "lambda" (mean, fraction of steps
    at the floor and at the ceiling, the last step's), "pairs_per_group" (mean)."""
    from groupwise.train.config import AlgorithmConfig

    floor, ceiling = AlgorithmConfig.lambda_min, AlgorithmConfig.lambda_max
    lens: dict[str, dict[str, Any]] = {}
    amir: dict[str, dict[str, Any]] = {}
    for method, runs in methods.items():
        if method == BASE:
            continue
        steps = [r["steps"] for r in runs]
        active = [_ratio(s["group_all_wrong_active"], s["group_all_wrong"]) for s in steps]
        shares = [float(np.nanmean(s["all_wrong_grad_share"])) for s in steps]
        edges = [_edges(s["all_wrong_grad_share"]) for s in steps]
        lens[method] = {
            "all_wrong": float(np.mean([np.nanmean(s["group_all_wrong"]) for s in steps])),
            "active": active,
            "active_mean": float(np.nanmean(active)),
            "grad_share": shares,
            "grad_share_mean": float(np.mean(shares)),
            "grad_share_first": float(np.mean([e[0] for e in edges])),
            "grad_share_last": float(np.mean([e[1] for e in edges])),
        }
        if method in AMIR_METHODS:
            lam = np.array([s["lambda"] for s in steps], dtype=float)
            amir[method] = {
                "lambda_mean": float(lam.mean()),
                "lambda_floor": float((lam <= floor * (1 + 1e-6)).mean()),
                "lambda_ceiling": float((lam >= ceiling * (1 - 1e-6)).mean()),
                "lambda_last": float(lam[:, -1].mean()),
                "pairs_per_group": float(np.mean([np.mean(s["pairs_per_group"]) for s in steps])),
            }
    return {"lens": lens, "amir": amir}


# ---------------------------------------------------------------------------------------------
# Tables and sentences


def _label(method: str) -> str:
    return "base policy" if method == BASE else METHODS[method].label


def _interval(low: float, high: float) -> str:
    return "–" if math.isnan(low) else f"[{low:+.1f}, {high:+.1f}]"


def budget_table(settings: BenchSettings) -> str:
    """Per level and method: its overrides and the questions, completions and optimizer steps
    of a run, read from the config each run is built from."""
    from groupwise.train.config_file import load_config

    lines = [
        "| level | method | overrides of configs/testbed_arith.yaml | questions | completions | "
        "optimizer steps |",
        "|---|---|---|---|---|---|",
    ]
    for level, methods in settings.levels.items():
        for method in methods:
            config = load_config(
                CONFIG, train_overrides(RunSpec(level, method, 0), settings, Path("unused"))
            )
            algo, rollout, steps = config.algorithm, config.rollout, config.train.max_steps
            questions = steps * rollout.questions_per_step
            updates = steps * algo.minibatches * algo.num_iterations
            overrides = ", ".join(f"`{o}`" for o in METHODS[method].overrides) or "none"
            lines.append(
                f"| {level} | {METHODS[method].label} | {overrides} | {questions} | "
                f"{questions * rollout.group_size} | {updates} |"
            )
    return "\n".join(lines)


def pass_table(level: Mapping[str, Any], ks: Sequence[int]) -> str:
    """pass@k per method: mean ± sd over seeds (the base: its 95 % bootstrap over problems),
    training accuracy and all-wrong groups over the first and last 10 % of steps, minutes."""
    lines = [
        "| method | seeds | "
        + " | ".join(f"pass@{k} (%)" for k in ks)
        + " | train acc first→last | all-wrong groups first→last | min/run |",
        "|---|---|" + "---|" * len(ks) + "---|---|---|",
    ]
    for method, row in level["table"].items():
        if method == BASE:
            cells = [
                f"{row[f'pass@{k}_mean']:.1f} [{row[f'pass@{k}_ci'][0]:.1f}, "
                f"{row[f'pass@{k}_ci'][1]:.1f}]"
                for k in ks
            ]
            lines.append(
                f"| base policy (95 % CI over problems) | – | {' | '.join(cells)} | – | – | "
                f"{row['minutes']:.1f} |"
            )
            continue
        cells = [
            f"{row[f'pass@{k}_mean']:.1f} ± {row[f'pass@{k}_sd']:.1f}"
            if len(row["seeds"]) > 1
            else f"{row[f'pass@{k}_mean']:.1f}"
            for k in ks
        ]
        acc, wrong = row["train_accuracy"], row["all_wrong"]
        lines.append(
            f"| {row['label']} | {len(row['seeds'])} | {' | '.join(cells)} | "
            f"{100 * acc[0]:.0f}→{100 * acc[1]:.0f} % | {100 * wrong[0]:.0f}→{100 * wrong[1]:.0f} %"
            f" | {row['minutes']:.1f} |"
        )
    return "\n".join(lines)


def difference_table(level: Mapping[str, Any], ks: Sequence[int]) -> str:
    """Per method and k: the mean difference to GRPO in points, its paired-seed interval and
    its problem-bootstrap interval; bold where both exclude zero."""
    lines = [
        "| method | " + " | ".join(f"Δ pass@{k}: mean [seeds] [problems]" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    for method, per_k in level["differences"].items():
        cells = []
        for k in ks:
            d = per_k[f"pass@{k}"]
            text = (
                f"{d['mean']:+.1f} {_interval(d['seed_low'], d['seed_high'])} "
                f"{_interval(d['problem_low'], d['problem_high'])}"
            )
            cells.append(f"**{text}**" if d["distinguishable"] else text)
        lines.append(f"| {_label(method)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curve_table(level: Mapping[str, Any]) -> str:
    """Held-out pass@1 (mean ± sd over seeds) at each curve step, per method."""
    curve = level["curve"]
    trained = [m for m in curve if m != BASE]
    if not trained:
        return ""
    steps = [p["step"] for p in curve[trained[0]]]
    lines = [
        "| method | " + " | ".join(f"step {s}" for s in steps) + " |",
        "|---|" + "---|" * len(steps),
    ]
    for method in trained:
        cells = [f"{p['pass@1']:.1f} ± {p['pass@1_sd']:.1f}" for p in curve[method]]
        lines.append(f"| {_label(method)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def lens_table(level: Mapping[str, Any]) -> str:
    """Per method: all-wrong groups, the share of them with a gradient, and their share of the
    gradient norm (mean over steps and seeds; first and last 10 % of steps)."""
    lines = [
        "| method | all-wrong groups | of them with a gradient | their share of the gradient "
        "norm: mean (first→last 10 % of steps) |",
        "|---|---|---|---|",
    ]
    for method, row in level["lens"].items():
        lines.append(
            f"| {_label(method)} | {100 * row['all_wrong']:.0f} % | "
            f"{100 * row['active_mean']:.0f} % | {row['grad_share_mean']:.4f} "
            f"({row['grad_share_first']:.4f}→"
            f"{row['grad_share_last']:.4f}) |"
        )
    return "\n".join(lines)


def amir_table(level: Mapping[str, Any]) -> str:
    """Per AMIR method: lambda (mean, share of steps at the floor and at the ceiling, last),
    pairs per group, and the held-out preference margin at each curve step."""
    if not level["amir"]:
        return ""
    curve = level["curve"]
    shown = [m for m in (REFERENCE, *AMIR_METHODS) if m in curve]
    steps = [p["step"] for p in curve[shown[0]]]
    lines = [
        "| method | λ mean | steps at λ floor | at λ ceiling | λ last | pairs/group | "
        + " | ".join(f"margin step {s}" for s in steps)
        + " |",
        "|---|---|---|---|---|---|" + "---|" * len(steps),
    ]
    for method in shown:
        row = level["amir"].get(method)
        head = (
            f"{row['lambda_mean']:.4f} | {100 * row['lambda_floor']:.0f} % | "
            f"{100 * row['lambda_ceiling']:.0f} % | {row['lambda_last']:.4f} | "
            f"{row['pairs_per_group']:.1f}"
            if row
            else "– | – | – | – | –"
        )
        margins = [
            "–" if p["margin"] is None else f"{p['margin']:.3f} ± {p['margin_sd']:.3f}"
            for p in curve[method]
        ]
        lines.append(f"| {_label(method)} | {head} | " + " | ".join(margins) + " |")
    return "\n".join(lines)


def _verdict(d: Mapping[str, float]) -> str:
    seeds = _interval(d["seed_low"], d["seed_high"])
    return (
        f"{d['mean']:+.1f} points (seeds {seeds}, problems "
        f"{_interval(d['problem_low'], d['problem_high'])})"
    )


def _pair(runs_a: Sequence[Mapping], runs_b: Sequence[Mapping], n: int, k: int) -> dict:
    """difference_to_reference of a against b (points) over the seeds both have."""
    other = {r["seed"]: r for r in runs_b}
    paired = [r for r in runs_a if r["seed"] in other]
    mine = np.stack([per_problem_pass(r, n, k) for r in paired])
    theirs = np.stack([per_problem_pass(other[r["seed"]], n, k) for r in paired])
    d = difference_to_reference(mine, theirs)
    return {key: 100 * v if key != "distinguishable" else v for key, v in d.items()}


def _seed_interval(values: Sequence[float]) -> str:
    if len(values) < 2:
        return f"{statistics.fmean(values):+.2f} (one seed)"
    mean, low, high = paired_seed_interval(values)
    return f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]"


def reading(
    numbers: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]], settings: BenchSettings
) -> str:
    """Sentences computed from the numbers: gain over the base, whether GRPO still rises at the
    end, which differences to GRPO are distinguishable from zero, the papers' claims checked
    against the intervals, and the mechanisms' headline numbers."""
    n, top = settings.eval_n, max(settings.eval_ks)
    runs = by_run(summaries)
    lines = []
    for level, num in numbers.items():
        table, diffs, methods = num["table"], num["differences"], runs[level]
        lines.append(f"### `{level}`")
        if BASE in table and REFERENCE in table:
            base = table[BASE]["pass@1_mean"]
            gains = [v - base for v in table[REFERENCE]["pass@1"]]
            lines.append(
                f"- Base pass@1 {base:.1f} %; GRPO's gain over it: "
                f"{_seed_interval(gains)} points (95 % t-interval over seeds)."
            )
        if REFERENCE in methods and BASE in methods:
            base_curve = methods[BASE][0]["curve"]
            points = [[*base_curve, *r["curve"]] for r in methods[REFERENCE]]
            last = [100 * (c[-1]["pass@1"] - c[-2]["pass@1"]) for c in points]
            steps = [p["step"] for p in points[0]]
            lines.append(
                f"- GRPO's held-out pass@1 from step {steps[-2]} to {steps[-1]}: "
                f"{_seed_interval(last)} points (95 % t-interval over seeds; an interval "
                "containing 0 means no measurable rise over the last stretch)."
            )
        lines += difference_lines(diffs, settings.eval_ks)
        if "gspo_m2" in methods and "grpo_m2" in methods:
            d = _pair(methods["gspo_m2"], methods["grpo_m2"], n, 1)
            lines.append(
                f"- GSPO M=2 against its control GRPO M=2 (same samples and optimizer steps): "
                f"pass@1 {_verdict(d)}"
                + (" – distinguishable." if d["distinguishable"] else " – not distinguishable.")
            )
        lines += _claims(level, num, methods, top)
    return "\n".join(lines)


def difference_lines(
    diffs: Mapping[str, Mapping[str, Mapping[str, float]]], ks: Sequence[int]
) -> list[str]:
    """Which differences to GRPO are distinguishable from zero (both 95 % intervals exclude it),
    at every k; the ones that are not, at pass@1 and at the largest k."""
    lines = []
    for k in sorted(ks):
        key = f"pass@{k}"
        apart = [m for m, d in diffs.items() if d[key]["distinguishable"]]
        together = [m for m in diffs if m not in apart]
        if apart:
            lines.append(
                f"- {key}: distinguishable from GRPO (both intervals exclude 0): "
                + "; ".join(f"{_label(m)} {_verdict(diffs[m][key])}" for m in apart)
                + "."
            )
        if together and k in (1, max(ks)):
            lines.append(
                f"- {key}: not distinguishable from GRPO: "
                + ", ".join(f"{_label(m)} ({diffs[m][key]['mean']:+.1f})" for m in together)
                + "."
            )
    return lines


def _claims(
    level: str, num: Mapping[str, Any], methods: Mapping[str, Sequence[Mapping]], top: int
) -> list[str]:
    """The papers' claims at this level, each against the measured intervals."""
    diffs, lines = num["differences"], []

    def outcome(d: Mapping[str, float]) -> str:
        if not d["distinguishable"]:
            return "not reproduced (no distinguishable difference)"
        return "reproduced" if d["mean"] > 0 else "reversed (distinguishably worse)"

    if "lens" in diffs:
        d1, dk = diffs["lens"]["pass@1"], diffs["lens"][f"pass@{top}"]
        lines.append(
            f"- LENS paper (MATH test, Qwen-2.5-3B: LENS above GRPO by 1.5 points at pass@1 "
            f"and 1.8 at pass@16; Llama-3.1-8B: 2.5 and 2.6): here "
            f"pass@1 {_verdict(d1)}, pass@{top} {_verdict(dk)}: {outcome(d1)} at pass@1, "
            f"{outcome(dk)} at pass@{top}."
        )
    ablation = [m for m in ("lens_mixed", "lens_negative", "lens") if m in diffs]
    if len(ablation) == 3:
        order = sorted(ablation, key=lambda m: diffs[m]["pass@1"]["mean"])
        lines.append(
            "- LENS ablation (paper Table 2: GRPO < mixed_only < negative_only < full at pass@1):"
            " here, by mean pass@1 difference to GRPO, "
            + " < ".join(f"{_label(m)} ({diffs[m]['pass@1']['mean']:+.1f})" for m in order)
            + "; the ablations differ from GRPO distinguishably only where marked above."
        )
    if "amir" in diffs:
        d1 = diffs["amir"]["pass@1"]
        lines.append(
            "- AMIR-GRPO paper (Table 1, Qwen2.5-3B: pass@1 above GRPO on 6 of 7 benchmarks, by "
            f"0.6-4.1 points): here {_verdict(d1)}: {outcome(d1)}."
        )
    margins = {m: [r["margin"] for r in runs] for m, runs in methods.items() if m != BASE}
    grpo_margin = margins.get(REFERENCE)
    for method in (m for m in AMIR_METHODS if m in margins and grpo_margin):
        other = {r["seed"]: r["margin"] for r in methods[REFERENCE]}
        paired = [
            r["margin"] - other[r["seed"]]
            for r in methods[method]
            if r["seed"] in other and r["margin"] is not None and other[r["seed"]] is not None
        ]
        ratio = statistics.fmean(margins[method]) / statistics.fmean(grpo_margin)
        lines.append(
            f"- Preference margin (paper Figure 4: AMIR-GRPO's mean margin 2.7x GRPO's), final "
            f"evaluation: {_label(method)} / GRPO = {ratio:.2f}x; difference "
            f"{_seed_interval(paired)} nats/token (95 % t-interval over seeds)."
        )
        curve = num["curve"]
        start, end = curve[method][0]["margin"], curve[method][-1]["margin"]
        grpo_end = curve[REFERENCE][-1]["margin"]
        if None not in (start, end, grpo_end):
            lines.append(
                f"  Over training (held-out curve): {_label(method)}'s margin {start:.3f} → "
                f"{end:.3f}, GRPO's {start:.3f} → {grpo_end:.3f} nats/token."
            )
    for method, row in num["lens"].items():
        if method in LENS_METHODS or method == REFERENCE:
            lines.append(
                f"- {_label(method)}: {100 * row['active_mean']:.0f} % of the all-wrong groups "
                f"({100 * row['all_wrong']:.0f} % of all groups) carry a gradient; they hold "
                f"{row['grad_share_mean']:.4f} of the update's gradient norm on average "
                f"({row['grad_share_first']:.4f} over the first 10 % of steps, "
                f"{row['grad_share_last']:.4f} over the last)."
            )
    for method, row in num["amir"].items():
        lines.append(
            f"- {_label(method)}: λ at its floor on {100 * row['lambda_floor']:.0f} % of steps, "
            f"at its ceiling on {100 * row['lambda_ceiling']:.0f} %, mean {row['lambda_mean']:.4f}"
            f"; {row['pairs_per_group']:.1f} pairs per group."
        )
    return lines


# ---------------------------------------------------------------------------------------------
# Figures


def _active_share(steps: Mapping[str, Sequence[float]]) -> np.ndarray:
    """Per step: of the all-wrong groups, the fraction with a non-zero advantage (NaN when the
    step has none)."""
    wrong = np.asarray(steps["group_all_wrong"], dtype=float)
    active = np.asarray(steps["group_all_wrong_active"], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(wrong > 0, active / wrong, np.nan)


PANELS: dict[str, tuple[str, Any]] = {
    "accuracy": ("training accuracy", lambda s: s["accuracy"]),
    "group_all_wrong": ("fraction of all-wrong groups", lambda s: s["group_all_wrong"]),
    "active": ("all-wrong groups with a gradient (fraction)", _active_share),
    "grad_share": (
        "all-wrong rows' share of the gradient norm",
        lambda s: s["all_wrong_grad_share"],
    ),
    "lambda": ("λ per step (log scale)", lambda s: s["lambda"]),
    "pairs_per_group": ("AMIR pairs per group", lambda s: s["pairs_per_group"]),
}


def _plot_steps(ax: Any, runs: Sequence[Mapping], panel: str, color: str, label: str) -> None:
    """Mean over seeds of the SMOOTH-step moving average of a per-step panel
    (groupwise.figures.moving_average), shaded between the lowest and highest seed."""
    from groupwise.figures import moving_average

    _, series = PANELS[panel]
    length = min(len(r["steps"]["step"]) for r in runs)
    smooth = np.stack([moving_average(series(r["steps"])[:length], SMOOTH) for r in runs])
    steps = np.arange(1, length + 1)
    with warnings.catch_warnings():  # all-NaN columns (no all-wrong group at a step) stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        ax.plot(steps, np.nanmean(smooth, 0), color=color, label=f"{label} ({len(runs)} seeds)")
        if len(runs) > 1:
            ax.fill_between(
                steps,
                np.nanmin(smooth, 0),
                np.nanmax(smooth, 0),
                color=color,
                alpha=0.12,
                linewidth=0,
            )


def _plot_curve(ax: Any, points: Sequence[Mapping], key: str, color: str, label: str) -> None:
    """A held-out curve: mean over seeds with ± sd error bars at each evaluated step."""
    rows = [p for p in points if p[key] is not None]
    ax.errorbar(
        [p["step"] for p in rows],
        [p[key] for p in rows],
        yerr=[p[f"{key}_sd"] for p in rows],
        color=color,
        label=label,
        marker="o",
        markersize=3,
        capsize=2,
    )


def plot_figure(
    numbers: Mapping[str, Any],
    summaries: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    methods_shown: Sequence[str],
    path: Path,
) -> Path | None:
    """One PNG: a row per level that has any of `methods_shown`, a column per entry of
    `columns` (a PANELS key, or "pass@1" / "margin" for the held-out curves). None when no
    level has those methods."""
    from groupwise.figures import new_figure, save_figure, series_colors

    runs = by_run(summaries)
    levels = [lv for lv in numbers if any(m in runs[lv] for m in methods_shown)]
    if not levels:
        return None
    colors = dict(zip(METHODS, series_colors(len(METHODS)), strict=True))
    fig, axes = new_figure(
        width=4.2 * len(columns), height=3.3 * len(levels), ncols=len(columns), nrows=len(levels)
    )
    for i, level in enumerate(levels):
        for method in (m for m in METHODS if m in methods_shown and m in runs[level]):
            for j, column in enumerate(columns):
                ax = axes[i, j]
                if column in ("pass@1", "margin"):
                    _plot_curve(
                        ax,
                        numbers[level]["curve"][method],
                        column,
                        colors[method],
                        METHODS[method].label,
                    )
                elif column not in ("lambda", "pairs_per_group") or method in AMIR_METHODS:
                    _plot_steps(
                        ax, runs[level][method], column, colors[method], METHODS[method].label
                    )
        for j, column in enumerate(columns):
            ax = axes[i, j]
            title = {
                "pass@1": "held-out pass@1 (%)",
                "margin": "held-out preference margin (nats/token)",
            }.get(column)
            ax.set_title(f"{level}: {title or PANELS[column][0]}", fontsize=9)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            if column == "lambda":
                ax.set_yscale("log")
        # The legend where the most methods are drawn (GRPO has no λ, only a margin).
        fullest = max(axes[i], key=lambda ax: len(ax.get_legend_handles_labels()[0]))
        fullest.legend(fontsize=6)
    return save_figure(fig, path)


FIGURES: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    # suffix -> (columns, methods, caption)
    "": (
        ("pass@1", "accuracy", "group_all_wrong"),
        tuple(METHODS),
        "Held-out pass@1 at the curve steps (mean ± sd over seeds; step 0 is the base policy), "
        f"and per step the training accuracy and the fraction of all-wrong groups (mean over "
        f"seeds of a {SMOOTH}-step moving average, shaded between the lowest and highest seed).",
    ),
    "-lens": (
        ("active", "grad_share", "group_all_wrong"),
        (REFERENCE, *LENS_METHODS),
        "LENS's mechanism per step: of the all-wrong groups, the fraction with a non-zero "
        "advantage (a policy gradient); the all-wrong rows' share of the update's gradient norm "
        "(||g_all-wrong|| / ||g||, before clipping); the fraction of all-wrong groups.",
    ),
    "-amir": (
        ("lambda", "pairs_per_group", "margin"),
        (REFERENCE, *AMIR_METHODS),
        "AMIR-GRPO's mechanism: λ per step under the loss rule and the gradient rule, mined "
        "pairs per group, and the held-out preference margin (mean l(correct) − mean "
        "l(incorrect), `groupwise analyze margin`) at the curve steps (mean ± sd over seeds).",
    ),
}


def write_results(
    settings: BenchSettings,
    summaries: Sequence[Mapping[str, Any]],
    folders: Sequence[Path],
    *,
    invocations: Sequence[Mapping[str, Any]],
    name: str = "learning",
    status: str = "",
) -> str:
    """NAME.md, NAME.json and the figures into each of `folders`; returns the Markdown.

    invocations: every invocation of the bench on this output folder so far, each {"command",
    "started" (UTC), "wall_seconds", "runs_made", "load_before", "load_after"}: a bench
    stopped and resumed reports each part and the total. status: a sentence put first (what
    part of the bench the results cover, when not all of it)."""
    numbers = aggregate(summaries, settings)
    total = sum(i["wall_seconds"] for i in invocations)
    runs = "\n".join(
        f"  - `{i['command']}` started {i['started']}: {i['wall_seconds'] / 60:.1f} min, "
        f"{i['runs_made']} runs made; load average (1/5/15 min) before {i['load_before']}, "
        f"after {i['load_after']}" + (f" ({i['note']})" if i.get("note") else "")
        for i in invocations
    )
    ks = settings.eval_ks
    seeds = sorted({s["seed"] for s in summaries if s["method"] != BASE})
    steps_text = ", ".join(f"{settings.steps[lv]} (`{lv}`)" for lv in settings.levels)
    level_sections = []
    for level, num in numbers.items():
        level_sections.append(f"""### level `{level}`

{pass_table(num, ks)}

Difference to GRPO, in points: the mean over seeds, its 95 % t-interval paired over seeds, and
its 95 % bootstrap interval over problems (seeds fixed); **bold**: both exclude zero.

{difference_table(num, ks)}

Held-out pass@1 (%) during training, first {settings.curve_problems} problems, n =
{settings.curve_n} (mean ± sd over seeds; step 0 is the base policy):

{curve_table(num)}""")
    mechanism_sections = []
    for level, num in numbers.items():
        mechanism_sections.append(f"#### `{level}`\n\n{lens_table(num)}\n\n{amir_table(num)}")
    figure_lines = [
        f"![{name}{suffix}]({name}{suffix}.png)\n\n{caption}"
        for suffix, (_, _, caption) in FIGURES.items()
    ]
    setup = "\n".join(
        [
            f"- machine: {machine()}",
            f"- wall time: {total / 60:.1f} min in all, over {len(invocations)} invocation(s) of "
            "the bench on this output folder (each makes the runs not yet complete):",
            runs,
            f"- training seeds: {seeds}, the same for every method (sampling and question order); "
            "the evaluation's problems and sampling seeds are the same for every run",
            f"- base policy: `{settings.model}` (groupwise.sft); every run fine-tunes all its "
            "weights from it",
            f"- every run: {steps_text} steps of {settings.questions_per_step} questions x "
            f"{settings.group_size} completions, lr {settings.lr} ({settings.schedule} schedule, "
            "10 % warm-up), binary 1/0 correctness reward, temperature 1.0, "
            "configs/testbed_arith.yaml",
            f"- held-out evaluation: the first {settings.eval_problems} `arith` test problems of "
            f"the level (no question shared with train), n = {settings.eval_n} samples per problem "
            "at temperature 1.0, unbiased pass@k (docs/algorithms.md §4); during training, the "
            "first "
            f"{settings.curve_problems} of them with n = {settings.curve_n} at "
            f"{settings.curve_points} evenly spaced checkpoints",
        ]
    )
    lead = f"**{status}**\n\n" if status else ""
    text = f"""# Learning testbed: GRPO, AMIR-GRPO, LENS, AMIR-GRPO + LENS, GSPO on `arith`

{lead}{setup}

## Methods and budgets

AMIR-GRPO uses margin 0.5 (binary rewards: every correct/wrong pair), beta_dpo 0.5; LENS alpha
0.25. GSPO takes its extra optimizer steps from 2 PPO mini-batches of the same rollout batch
(the second is off-policy, so its tight clip acts), not from more samples; GRPO M=2, the same
split for GRPO, separates the effect of the extra steps from that of the sequence-level ratio.

{budget_table(settings)}

## pass@k on held-out problems

pass@k: mean ± standard deviation over seeds. The base row's interval is a 95 % bootstrap over
problems: the evaluation noise of one policy.

{(chr(10) * 2).join(level_sections)}

## Mechanisms

LENS (`train.log_all_wrong_gradient`): per step, the all-wrong groups that carry a non-zero
advantage (so a policy gradient), and the all-wrong rows' share of the update's gradient norm.
AMIR-GRPO: λ per step under the official loss rule and under `lambda_measure: grad`, pairs per
group, and the held-out preference margin of `groupwise analyze margin` at the curve steps.

{(chr(10) * 2).join(mechanism_sections)}

## Figures

{(chr(10) * 2).join(figure_lines)}

## What the numbers say (computed from the intervals above)

{reading(numbers, summaries, settings)}
"""
    payload = {
        "settings": settings.to_dict(),
        "invocations": list(invocations),
        "wall_seconds": total,
        "numbers": numbers,
        "runs": [{k: v for k, v in s.items() if k != "steps"} for s in summaries],
    }
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.md").write_text(text)
        (folder / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
        for suffix, (columns, shown, _) in FIGURES.items():
            plot_figure(numbers, summaries, columns, shown, folder / f"{name}{suffix}.png")
    return text
