"""`groupwise analyze {perplexity,coverage,margin,errors}`: each reads saved evaluation samples
(`groupwise eval --output DIR`) of one or more runs, given as NAME=EVAL_DIR, and writes a
figure (PNG) and the numbers behind it (JSON, CSV) into --output.
"""

from __future__ import annotations

import argparse
import importlib

from groupwise.cpu_threads import announce

# name -> (module, one-line help); modules are imported only when chosen
ANALYSES: dict[str, tuple[str, str]] = {
    "perplexity": (
        "groupwise.analysis.perplexity",
        "PPL of rollouts under their own model, jointly solvable vs unsolved (Fig. 3)",
    ),
    "coverage": (
        "groupwise.analysis.coverage",
        "solvable-set partition across 2-6 runs, % of the union (Table 2)",
    ),
    "margin": (
        "groupwise.analysis.preference_margin",
        "preference margin: per problem, mean log-prob of correct minus incorrect "
        "completions (Fig. 4)",
    ),
    "errors": (
        "groupwise.analysis.error_position.command",
        "first erroneous step and error type by a judge model (Figs. 5-6)",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One subcommand per analysis, each with its own arguments and --quiet. A help text is
    shown as written in the description and %-formatted in the list, hence its % doubled."""
    sub = parser.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    for name, (module_name, help_text) in ANALYSES.items():
        module = importlib.import_module(module_name)
        parser = sub.add_parser(name, help=help_text.replace("%", "%%"), description=help_text)
        module.add_arguments(parser)
        parser.add_argument(
            "--quiet", action="store_true", help="no progress bars (judging, model loading)"
        )


def run(args: argparse.Namespace) -> int:
    announce("groupwise analyze")
    if args.quiet:
        from groupwise.models import hide_loading_bars

        hide_loading_bars()
    module = importlib.import_module(ANALYSES[args.analysis][0])
    return int(module.run(args) or 0)
