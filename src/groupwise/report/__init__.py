"""`groupwise report`: runs compared, as a table on the terminal or as a page.

- command.py: the command (`groupwise report`; `groupwise summary` is its former name);
- summary.py: a training run summarized, and the comparison table of several;
- methods.py: what a run's config trains, in words (its method's name, what it learns from);
- tables.py: the page's tables (pass@k, held-out evaluations, settings, calibration);
- plots.py: the figures (the page's, the table's, a run's own run.png);
- page.py: the page's blocks and their Markdown / HTML.

Run folders are read by groupwise.run_reader. The names below are the package's public ones.
"""

from groupwise.report.command import add_arguments, run
from groupwise.report.page import build_page, render_html, render_markdown
from groupwise.report.plots import plot_curves, plot_heldout, plot_pass1, plot_run, plot_runs
from groupwise.report.summary import (
    RunSummary,
    comparison_table,
    method_label,
    run_labels,
    summarize,
    summary_text,
    versus,
)
from groupwise.report.tables import eval_tables, heldout_table, settings_mismatches
from groupwise.run_reader import RunRecord, absent_terms, find_results, load_record, read_metrics

__all__ = [
    "RunRecord",
    "RunSummary",
    "absent_terms",
    "add_arguments",
    "build_page",
    "comparison_table",
    "eval_tables",
    "find_results",
    "heldout_table",
    "load_record",
    "method_label",
    "plot_curves",
    "plot_heldout",
    "plot_pass1",
    "plot_run",
    "plot_runs",
    "read_metrics",
    "render_html",
    "render_markdown",
    "run",
    "run_labels",
    "settings_mismatches",
    "summarize",
    "summary_text",
    "versus",
]
