"""Deprecated: `groupwise summary RUN...` and `python -m groupwise.train.summary RUN...` are
`groupwise report RUN...` (the same arguments), which prints the comparison table of training
runs; they still work, and say so on stderr after they ran. The functions that lived here are
in groupwise.report (summary: summarize, summary_text, comparison_table, ...; plots: plot_run,
plot_runs); their former names here still work, with a DeprecationWarning.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from groupwise.entry import main_of
from groupwise.report import command, plots, summary

NOTE = "groupwise summary is deprecated: use groupwise report RUN... (the same arguments)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`groupwise report`'s arguments, under the former name."""
    command.add_arguments(parser)
    parser.description = NOTE


def run(args: argparse.Namespace) -> int:
    """`groupwise report`, then the deprecation note on stderr (after the output, so that a
    mistake stays one line)."""
    status = command.run(args)
    print(f"note: {NOTE}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m groupwise.train.summary`: `groupwise report`, its errors one line too."""
    return main_of("python -m groupwise.train.summary", add_arguments, run, argv)


_MOVED = {
    **{name: summary for name in summary.__all__},
    "plot_run": plots,
    "plot_runs": plots,
    "RUN_FIGURE": plots,
    "SMOOTHING": plots,
}


def __getattr__(name: str) -> Any:
    """A name that moved to groupwise.report, with a DeprecationWarning naming its place."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"groupwise.train.summary.{name} is deprecated: use {_MOVED[name].__name__}.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_MOVED[name], name)


if __name__ == "__main__":
    raise SystemExit(main())
