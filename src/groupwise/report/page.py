"""`groupwise report RUN... --output PAGE.md|PAGE.html`: one page comparing runs.

For each run (NAME=DIR or DIR; read by groupwise.run_reader): its training curves from
DIR/metrics.jsonl (missing keys and a torn last line of a run still in progress are tolerated;
a term the run's config.yaml says it has not, AMIR's preference loss and lambda without
algorithm.amir, KL at algorithm.kl_coef 0, is left out rather than drawn as a line at 0), its
held-out evaluations during training from DIR/heldout.jsonl (before the first step, during,
after the last, pass@k with intervals over problems) and its evaluation tables from
DIR/eval/*/results.json, DIR/results.json, or a results.json file given directly. Curves of all
runs share one figure (one panel per metric); evaluations are compared in one table per k
(rows: benchmarks, columns: evaluations) and a pass@1 bar chart; the calibration of evaluations
whose prompt asked for a confidence (docs/algorithms.md §6) per benchmark, and each one's
difference to the first with paired bootstrap intervals (read from the samples.jsonl beside
each results.json). Figures are written as PNG next to the page, named after it.

A page is a list of blocks: ("h", level, text), ("p", text), ("img", file, alt), ("table",
header, rows); render_markdown / render_html turn it into text.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from groupwise.records import RESULTS_FILE
from groupwise.report.plots import plot_curves, plot_heldout, plot_pass1, smoothing_note
from groupwise.report.tables import (
    PAIRED_HEADER,
    RUNS_HEADER,
    SETTINGS_HEADER,
    calibrated_benchmarks,
    eval_tables,
    heldout_rows,
    paired_calibration_rows,
    runs_rows,
    settings_mismatches,
    settings_rows,
)
from groupwise.run_reader import RunRecord

Block = tuple[Any, ...]


def heldout_blocks(records: Sequence[RunRecord], page: Path) -> list[Block]:
    """The page's section on the runs' held-out evaluations during training ([] when none)."""
    if not any(r.heldout for r in records):
        return []
    header, rows = heldout_rows(records)
    figure = plot_heldout(records, page.with_name(f"{page.stem}-heldout.png"))
    return [
        ("h", 2, "Held-out evaluations during training"),
        (
            "p",
            "From each run's heldout.jsonl (train.eval_every, data.heldout): the policy before "
            "the first step, during training and after the last step, each run's evaluations on "
            "the same problems with the same random streams; pass@k in percent (unbiased "
            "estimator, mean over problems) with its 95 % bootstrap interval over problems.",
        ),
        *_unpaired_blocks(records),
        ("table", header, rows),
        ("img", figure.name, "held-out pass@1 over training"),
    ]


def _unpaired_blocks(records: Sequence[RunRecord]) -> list[Block]:
    """A warning naming the runs whose step-0 held-out evaluation differs from the first
    run's on the same problems (correct counts per problem): they did not draw the same
    samples (another engine, seed or model), so their numbers are not paired problem by
    problem with the first run's. [] when there is none."""
    runs = [r for r in records if r.heldout and r.heldout[0]["step"] == 0]
    if len(runs) < 2:
        return []
    first = runs[0].heldout[0]

    def differs(evaluation: Mapping[str, Any]) -> bool:
        same_problems = evaluation.get("problem_ids") == first.get("problem_ids")
        same_size = len(evaluation["correct"]) == len(first["correct"])
        alike = same_problems and same_size and evaluation["n"] == first["n"]
        return alike and evaluation["correct"] != first["correct"]

    unpaired = [r.name for r in runs[1:] if differs(r.heldout[0])]
    if not unpaired:
        return []
    return [
        (
            "p",
            f"Not paired: the step-0 evaluation of {', '.join(unpaired)} differs from "
            f"{runs[0].name}'s on the same problems, so those runs did not draw the same "
            "samples (another engine, seed or model); compare their accuracies, not their "
            "problem-by-problem differences.",
        )
    ]


def calibration_blocks(
    evals: Mapping[str, Mapping[str, Any]], samples: Mapping[str, Path]
) -> list[Block]:
    """The page's calibration section: each calibrated evaluation's figures per benchmark, then
    the paired differences against the first one ([] when no evaluation has calibration)."""
    from groupwise.evaluation.calibration import CALIBRATION_HEADER, calibration_cells

    calibrated = [label for label, r in evals.items() if calibrated_benchmarks(r)]
    if not calibrated:
        return []
    benches = list(
        dict.fromkeys(b for label in calibrated for b in calibrated_benchmarks(evals[label]))
    )
    rows = [
        [bench, label, *calibration_cells(evals[label][bench]["calibration"])]
        for bench in benches
        for label in calibrated
        if bench in calibrated_benchmarks(evals[label])
    ]
    blocks: list[Block] = [
        ("h", 2, "Calibration"),
        (
            "p",
            "Stated confidences of the evaluations whose prompt asks for one "
            "(docs/algorithms.md §6): completions without a parsable confidence are counted "
            "(coverage, missing) and left out of the other figures, never read as 0.5; ECE "
            "with M = 10 bins; 95 % bootstrap intervals over problems.",
        ),
        ("table", ["benchmark", "evaluation", *CALIBRATION_HEADER], rows),
    ]
    paired = paired_calibration_rows(evals, samples)
    if paired:
        blocks += [
            ("h", 3, "Calibration differences (paired)"),
            (
                "p",
                f"Each evaluation minus {calibrated[0]}, on the problems both have: the "
                "difference of each figure with a paired 95 % bootstrap interval (each resample "
                "draws the problems once for both runs). Lower Brier and ECE are better, higher "
                "AUROC; an interval that excludes 0 is a difference beyond resampling noise.",
            ),
            ("table", PAIRED_HEADER, paired),
        ]
    elif len(calibrated) > 1:
        blocks.append(
            (
                "p",
                "No paired differences: they need each evaluation's samples.jsonl beside its "
                "results.json.",
            )
        )
    return blocks


def render_markdown(blocks: Sequence[Block]) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append("#" * block[1] + " " + block[2])
        elif kind == "p":
            out.append(block[1])
        elif kind == "img":
            out.append(f"![{block[2]}]({block[1]})")
        elif kind == "table":
            header, rows = block[1], block[2]
            lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in rows]
            out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def render_html(blocks: Sequence[Block], title: str) -> str:
    esc = html.escape
    body = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            body.append(f"<h{block[1]}>{esc(block[2])}</h{block[1]}>")
        elif kind == "p":
            body.append(f"<p>{esc(block[1])}</p>")
        elif kind == "img":
            body.append(f'<img src="{esc(block[1])}" alt="{esc(block[2])}">')
        elif kind == "table":
            head = "".join(f"<th>{esc(c)}</th>" for c in block[1])
            rows = "".join(
                "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in block[2]
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
    style = (
        "body{font-family:sans-serif;max-width:1200px;margin:auto}img{max-width:100%}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
    )
    return (
        f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def evaluations(
    records: Sequence[RunRecord],
) -> tuple[dict[str, dict[str, Any]], dict[str, Path]]:
    """Every evaluation of the runs by its name on the page: RUN/LABEL for a run's eval/LABEL;
    LABEL alone for one run with one evaluation; RUN alone for an evaluation folder (or
    results.json) given itself, whose label is its own folder's name (never "NAME/NAME"):
    ({name: results.json}, {name: the samples.jsonl beside it, where there is one})."""

    def name(record: RunRecord, label: str) -> str:
        path = record.path
        own = path.is_file() or (path / RESULTS_FILE).is_file()
        if own and label == (path.parent.name if path.is_file() else path.name):
            return record.name
        return f"{record.name}/{label}" if len(records) > 1 or len(record.evals) > 1 else label

    evals = {name(r, label): results for r in records for label, results in r.evals.items()}
    samples = {name(r, label): path for r in records for label, path in r.samples.items()}
    return evals, samples


def evaluation_blocks(evals: Mapping[str, Mapping[str, Any]]) -> list[Block]:
    """What pass@k means here, then one table per k (rows: benchmarks, columns: `evals`)."""
    blocks: list[Block] = [
        (
            "p",
            "pass@k in percent (unbiased estimator, mean over problems) with its "
            "95 % bootstrap interval over problems.",
        )
    ]
    for k, header, rows in eval_tables(evals):
        blocks += [("h", 3, f"pass@{k}"), ("table", header, rows)]
    return blocks


def build_page(records: Sequence[RunRecord], page: Path, title: str) -> list[Block]:
    """The page's blocks; writes its figures next to `page` as <stem>-*.png."""
    blocks: list[Block] = [
        ("h", 1, title),
        ("h", 2, "Runs"),
        ("table", RUNS_HEADER, runs_rows(records)),
    ]
    curves = plot_curves(records, page.with_name(f"{page.stem}-training.png"))
    if curves is not None:
        blocks += [
            ("h", 2, "Training curves"),
            (
                "p",
                "From each run's metrics.jsonl ("
                + smoothing_note([len(r.metrics) for r in records if r.metrics])
                + "); rewards of different definitions in panels of their own.",
            ),
            ("img", curves.name, "training curves"),
        ]
    blocks += heldout_blocks(records, page)
    evals, samples = evaluations(records)
    if evals:
        blocks += [
            ("h", 2, "Evaluation settings"),
            ("table", SETTINGS_HEADER, settings_rows(evals)),
        ]
        mismatches = settings_mismatches(evals)
        if mismatches:
            blocks.append(
                (
                    "p",
                    "Warning: these evaluations differ in settings that change pass@k, so their "
                    "numbers do not measure the same thing: " + "; ".join(mismatches) + ".",
                )
            )
        blocks += [("h", 2, "Evaluation"), *evaluation_blocks(evals)]
        bars = plot_pass1(evals, page.with_name(f"{page.stem}-pass1.png"))
        if bars is not None:
            blocks.append(("img", bars.name, "pass@1 per benchmark"))
        blocks += calibration_blocks(evals, samples)
    return blocks
