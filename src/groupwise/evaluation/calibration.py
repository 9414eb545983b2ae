"""Calibration in the results of `groupwise eval`: when the prompt asks for a confidence
(`Template.asks_confidence`: the `amir` prompts), each benchmark (and each MATH level) gets the
figures of groupwise.calibration with their bootstrap intervals over problems
(docs/algorithms.md §6), a Markdown table, and the run a reliability diagram (calibration.png).

The figures are computed from the saved samples (samples.jsonl's `confidence`, read by
groupwise.rewards.parse_confidence), so every engine gets them, and a rerun recomputes them.
A completion without a parsable confidence is counted as missing (coverage), never set to 0.5.
How to read them: docs/guides/calibration.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from groupwise.records import Sample
from groupwise.run_reader import is_number

CALIBRATION_FIGURE = "calibration.png"
HARD_LEVELS = (4, 5)  # as groupwise.evaluation.results: the LENS paper's hard subset
HARD_LABEL = "4-5"


def asks_confidence(prompt: str) -> bool:
    """Whether the prompt template `prompt` asks for a verbalized confidence."""
    from groupwise.data.prompts import TEMPLATES

    return prompt in TEMPLATES and TEMPLATES[prompt].asks_confidence


def sample_arrays(problems: Sequence[Sequence[Sample]]) -> dict[str, list[Any]]:
    """{"confidence", "correct", "problems"} of every sample of `problems` (one list of samples
    per problem), as groupwise.calibration takes them."""
    samples = [s for group in problems for s in group]
    return {
        "confidence": [s.confidence for s in samples],
        "correct": [int(s.correct) for s in samples],
        "problems": [s.problem_id for s in samples],
    }


def calibration_entry(problems: Sequence[Sequence[Sample]], seed: int) -> dict[str, Any]:
    """The calibration table of one benchmark (groupwise.calibration.calibration_table, M = 10,
    1000 resamples seeded with `seed`) with "reliability": the equal-width ("uniform") and
    equal-mass ("quantile") bins {"edges", "count", "confidence", "accuracy"} of the diagram."""
    from groupwise.calibration import BINNINGS, calibration_table, reliability_bins

    arrays = sample_arrays(problems)
    table = calibration_table(
        arrays["confidence"], arrays["correct"], arrays["problems"], seed=seed
    )
    table["reliability"] = {
        strategy: reliability_bins(arrays["confidence"], arrays["correct"], strategy=strategy)
        for strategy in BINNINGS
    }
    return table


def level_calibration(
    problems: Sequence[Sequence[Sample]], levels: Sequence[int | None], seed: int
) -> dict[str, dict[str, Any]]:
    """{"1": table, ..., "5": table, "4-5": table}: `calibration_entry` of the problems of each
    MATH level present, and of Levels 4-5 together."""
    groups: dict[str, list[Sequence[Sample]]] = {}
    for level in sorted({lv for lv in levels if lv is not None}):
        groups[str(level)] = [g for g, lv in zip(problems, levels, strict=True) if lv == level]
    hard = [g for g, lv in zip(problems, levels, strict=True) if lv in HARD_LEVELS]
    if hard:
        groups[HARD_LABEL] = hard
    return {label: calibration_entry(subset, seed) for label, subset in groups.items()}


def add_calibration(
    results: dict[str, Any],
    groups: Mapping[str, Sequence[Sequence[Sample]]],
    levels: Mapping[str, Sequence[int | None]] | None,
    seed: int,
) -> None:
    """Put "calibration" into each benchmark of `results` (and into each of its "levels")."""
    for bench, problems in groups.items():
        if bench not in results:
            continue
        results[bench]["calibration"] = calibration_entry(problems, seed)
        if "levels" not in results[bench]:
            continue
        by_level = level_calibration(problems, (levels or {})[bench], seed)
        for label, table in results[bench]["levels"].items():
            if label in by_level:
                table["calibration"] = by_level[label]


def value_with_interval(
    table: Mapping[str, Any],
    key: str,
    scale: float = 100.0,
    digits: int = 1,
    *,
    signed: bool = False,
) -> str:
    """table[key] x scale with its interval table[key_ci] ("-" when undefined or not a number;
    the interval only where it is two numbers); signed for a difference (a leading + on
    positive values). Every table of value and interval is written with it (eval, report)."""
    value, ci = table.get(key), table.get(f"{key}_ci")
    if not is_number(value):
        return "-"
    form = f"{'+' if signed else ''}.{digits}f"
    text = f"{scale * value:{form}}"
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(is_number(c) for c in ci):
        text += f" [{scale * ci[0]:{form}}, {scale * ci[1]:{form}}]"
    return text


CALIBRATION_HEADER = [
    "coverage (%)",
    "missing",
    "Brier",
    "ECE equal-mass",
    "ECE equal-width",
    "AUROC",
    "conf - acc (pts)",
]


def calibration_cells(table: Mapping[str, Any]) -> list[str]:
    """The cells of one calibration table, in the order of CALIBRATION_HEADER: coverage in
    percent, the missing count, Brier, the two ECEs and AUROC as fractions, mean confidence
    minus accuracy in percentage points; each with its 95 % interval, '-' where undefined."""
    return [
        value_with_interval(table, "coverage"),
        str(table["missing"]),
        value_with_interval(table, "brier", 1.0, 3),
        value_with_interval(table, "ece_mass", 1.0, 3),
        value_with_interval(table, "ece_width", 1.0, 3),
        value_with_interval(table, "auroc", 1.0, 3),
        value_with_interval(table, "overconfidence"),
    ]


def calibration_markdown(results: Mapping[str, Any]) -> list[str]:
    """Markdown lines: a calibration table per benchmark (rows) and its levels; [] when no
    benchmark has calibration."""
    benches = [b for b, v in results.items() if isinstance(v, dict) and "calibration" in v]
    if not benches:
        return []

    def table(rows: list[list[str]], first: str) -> list[str]:
        header = [first, *CALIBRATION_HEADER]
        return [
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows),
        ]

    lines = [
        "",
        "Calibration of the stated confidences (docs/algorithms.md §6; completions without a "
        "parsable confidence are counted as missing and left out, never read as 0.5; "
        "ECE with M = 10 bins; 95 % bootstrap intervals over problems):",
        "",
    ]
    lines += table(
        [[b, *calibration_cells(results[b]["calibration"])] for b in benches], "benchmark"
    )
    for bench in benches:
        leveled = {
            label: t["calibration"]
            for label, t in results[bench].get("levels", {}).items()
            if "calibration" in t
        }
        if leveled:
            lines += ["", f"{bench} calibration by MATH difficulty level:", ""]
            name = {
                label: f"Levels {label}" if "-" in label else f"Level {label}" for label in leveled
            }
            lines += table(
                [[name[lv], *calibration_cells(t)] for lv, t in leveled.items()], "level"
            )
    return lines


def plot_reliability(results: Mapping[str, Any], path: Path) -> Path | None:
    """The reliability diagram: one panel per benchmark, accuracy against mean confidence of
    each non-empty bin, equal-width bins (markers sized by their completions) and equal-mass
    bins (dashed), the diagonal of perfect calibration, and the panel's coverage, ECEs and
    Brier score in its title. None (nothing written) when no benchmark has calibration."""
    from groupwise.figures import new_figure, save_figure, series_colors

    benches = [b for b, v in results.items() if isinstance(v, dict) and "calibration" in v]
    if not benches:
        return None
    ncols = min(4, len(benches))
    nrows = -(-len(benches) // ncols)
    fig, axes = new_figure(width=4.2 * ncols, height=4.2 * nrows, ncols=ncols, nrows=nrows)
    width_color, mass_color = series_colors(2)
    for ax, bench in zip(axes.flat, benches, strict=False):
        table = results[bench]["calibration"]
        ax.plot([0, 1], [0, 1], color="0.6", linewidth=0.8, linestyle=":")
        for strategy, color, style in (
            ("uniform", width_color, "-"),
            ("quantile", mass_color, "--"),
        ):
            bins = table["reliability"][strategy]
            full = [i for i, c in enumerate(bins["count"]) if c]
            xs = [bins["confidence"][i] for i in full]
            ys = [bins["accuracy"][i] for i in full]
            label = "equal-width bins" if strategy == "uniform" else "equal-mass bins"
            ax.plot(xs, ys, style, color=color, linewidth=1.0, label=label)
            if strategy == "uniform" and full:
                most = max(bins["count"])
                sizes = [12 + 100 * bins["count"][i] / most for i in full]
                ax.scatter(xs, ys, s=sizes, color=color, zorder=3)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("stated confidence")
        ax.set_ylabel("accuracy")
        ece_mass = "-" if table["ece_mass"] is None else f"{table['ece_mass']:.3f}"
        ece_width = "-" if table["ece_width"] is None else f"{table['ece_width']:.3f}"
        brier = "-" if table["brier"] is None else f"{table['brier']:.3f}"
        ax.set_title(
            f"{bench}\ncoverage {100 * table['coverage']:.0f}%, ECE {ece_mass} (mass) / "
            f"{ece_width} (width), Brier {brier}",
            fontsize=8,
        )
    for ax in list(axes.flat)[len(benches) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="upper left")
    return save_figure(fig, path)
