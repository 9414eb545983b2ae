"""`groupwise report RUN...`: the one command that compares runs.

    groupwise report runs/grpo runs/amir runs/lens [--png FIG.png] [--each]

prints the comparison table of training runs (held-out accuracy before and after training with
the paired 95 % interval of the difference, completions sampled, group shares, each method's
own signal; groupwise.report.summary), each run's lines with --each, and draws reward and
held-out accuracy with --png. A run is named by its method (and folder, when runs share one),
or NAME=RUN. Each run's final accuracy is paired with the first run's only where their step-0
held-out evaluations agree problem by problem (the same base policy on the same sampling
streams); where they differ (another engine, seed or model) the runs did not sample alike, so
the table marks the run "not paired" and leaves the interval out, and stderr says why in one
line.

    groupwise report EVAL_DIR...

prints the pass@k tables of evaluation folders (`groupwise eval`'s results.json), one per k
(--png: their pass@1 bars); evaluation folders beside training runs go on a page (--output).

    groupwise report RUN_OR_EVAL... --output PAGE.md|PAGE.html

writes the page: training curves, held-out evaluations, evaluation settings, pass@k and
calibration tables of training runs and evaluation folders (groupwise.report.page).

`groupwise summary` and `python -m groupwise.train.summary` are its former names.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from groupwise.report.page import (
    build_page,
    evaluation_blocks,
    evaluations,
    render_html,
    render_markdown,
)
from groupwise.report.plots import plot_pass1, plot_runs
from groupwise.report.summary import (
    comparison_table,
    run_labels,
    summarize,
    summary_text,
    unpaired_warning,
)
from groupwise.report.tables import settings_mismatches
from groupwise.run_reader import METRICS_FILE, RunRecord, find_results, load_record


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`groupwise report`'s arguments."""
    parser.description = __doc__.splitlines()[0]
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="training runs (metrics.jsonl, heldout.jsonl, config.yaml, eval/*/results.json); "
        "with --output also eval folders or results.json files; NAME=PATH names one",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="write the page: .md (Markdown) or .html, figures next to it; without it, print "
        "the comparison table of the training runs",
    )
    parser.add_argument("--png", type=Path, help="the table: draw reward and held-out accuracy")
    parser.add_argument("--each", action="store_true", help="the table: print each run's lines")
    parser.add_argument("--title", default="groupwise report", help="the page's title")
    parser.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="the page: compare evaluations even when they differ in a setting that changes "
        "pass@k (temperature, top-p, max new tokens, prompt, checking, stop strings, limit); "
        "the page then says which",
    )


def run(args: argparse.Namespace) -> int:
    """The page with --output, else the table. A run that cannot be read, or a file name of
    the wrong kind, raises: the entry point prints it as one line, exit status 2."""
    from groupwise.analysis.runs import parse_run_specs

    if args.output is None:
        folders = parse_run_specs(args.runs)
        if any(is_evaluation_folder(path) for path in folders.values()):
            return print_evaluations(folders, args.png, args.each, args.allow_mismatch)
        return print_table(args.runs, args.png, args.each)
    if args.png is not None or args.each:
        raise SystemExit("--png and --each go with the printed table; leave out --output")
    page: Path = args.output
    if page.suffix.lower() not in (".md", ".html", ".htm"):
        raise SystemExit(f"--output {page}: use a .md or .html file name")
    records = [load_record(name, path) for name, path in parse_run_specs(args.runs).items()]
    check_settings(records, args.allow_mismatch)
    page.parent.mkdir(parents=True, exist_ok=True)
    blocks = build_page(records, page, args.title)
    text = (
        render_markdown(blocks) if page.suffix.lower() == ".md" else render_html(blocks, args.title)
    )
    page.write_text(text, encoding="utf-8")
    print(f"wrote {page}")
    return 0


def check_settings(records: list[RunRecord], allow_mismatch: bool) -> None:
    """Refuse evaluations that differ in a setting that changes pass@k, unless allowed."""
    mismatches = settings_mismatches(evaluations(records)[0])
    if mismatches and not allow_mismatch:
        raise SystemExit(
            "the evaluations differ in settings that change pass@k ("
            + "; ".join(mismatches)
            + "); compare evaluations made alike, or pass --allow-mismatch"
        )


def is_evaluation_folder(path: Path) -> bool:
    """An evaluation's folder or results.json (`groupwise eval`), not a training run's."""
    return not (path / METRICS_FILE).is_file() and bool(path.exists() and find_results(path))


def print_evaluations(
    folders: dict[str, Path], png: Path | None, each: bool, allow_mismatch: bool
) -> int:
    """Print the pass@k tables of evaluation folders (one per k: rows benchmarks, columns
    evaluations) and draw their pass@1 bars into `png`. A training run among them, or --each,
    is an error saying what to do instead: the table of training runs does not hold
    evaluations, a page (--output) holds both."""
    runs = [name for name, path in folders.items() if not is_evaluation_folder(path)]
    if runs or each:
        evals = ", ".join(str(p) for p in folders.values() if is_evaluation_folder(p))
        what = f"{', '.join(runs)} (training runs) beside " if runs else "--each with "
        raise SystemExit(
            f"{what}evaluation folders ({evals}): the printed table compares training runs, "
            "`groupwise report EVAL_DIR...` evaluations; to see both, write a page: add "
            "--output report.md"
        )
    if png is not None and png.suffix.lower() != ".png":
        raise ValueError(f"--png {png}: the figure is a PNG file; name it NAME.png")
    records = [load_record(name, path) for name, path in folders.items()]
    check_settings(records, allow_mismatch)
    evals, _ = evaluations(records)
    print(render_markdown(evaluation_blocks(evals)), end="")
    figure = plot_pass1(evals, png) if png is not None else None
    if figure is not None:
        print(f"figure: {figure}")
    return 0


def print_table(specs: list[str], png: Path | None, each: bool) -> int:
    """Print the comparison table of the training runs `specs` (RUN or NAME=RUN), each run's
    lines first with `each`, and draw the figure into `png`."""
    from groupwise.analysis.runs import parse_run_specs

    if png is not None and png.suffix.lower() != ".png":
        raise ValueError(f"--png {png}: the figure is a PNG file; name it NAME.png")
    folders = parse_run_specs(specs)
    summaries = [summarize(path) for path in folders.values()]
    labels = [
        name if "=" in spec else label
        for spec, name, label in zip(specs, folders, run_labels(summaries), strict=True)
    ]
    if each:
        for s in summaries:
            print(f"{s.path}: {summary_text(s)}\n")
    print(comparison_table(summaries, labels))
    warning = unpaired_warning(summaries, labels)
    if warning is not None:
        print(warning, file=sys.stderr)
    if png is not None:
        print(f"figure: {plot_runs(summaries, png, labels)}")
    return 0
