"""The `groupwise` command: a thin dispatcher over the subcommands.

Each subcommand lives beside the code it drives and exposes `add_arguments(parser)` and
`run(args) -> int`; they are imported only when chosen, so `groupwise --help` stays fast. The
commands that compute (COMPUTING) set their CPU threads before torch loads
(groupwise.cpu_threads) and say what they took once their arguments are checked. `groupwise
train` takes options and overrides in any order (`groupwise train --config C.yaml --resume
train.max_steps=80`); argparse cannot mix them for commands with subcommands (analyze).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

from groupwise.cpu_threads import settle_threads
from groupwise.entry import OneLineParser, debugging, run_command

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("groupwise.train.command", "train a policy with GRPO / AMIR-GRPO / LENS / GSPO"),
    "eval": ("groupwise.evaluation.command", "sample n completions per problem and report pass@k"),
    "analyze": ("groupwise.analysis.command", "the AMIR-GRPO paper's diagnostics as figures"),
    "report": (
        "groupwise.report.command",
        "compare runs: training runs in one table (--png: a figure), or a page (--output)",
    ),
    "view": (
        "groupwise.view.command",
        "a page of a run's groups and pairs, an evaluation's samples, or two side by side",
    ),
    "summary": ("groupwise.train.summary", "deprecated: groupwise report (the same arguments)"),
}

COMPUTING = ("train", "eval", "analyze")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = OneLineParser(prog="groupwise", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv or ["--help"])
        return 2
    if argv[0] in COMPUTING:
        settle_threads()  # before the subcommand imports torch: OpenMP reads them at load
    quiet = not debugging()
    formatwarning = warnings.formatwarning
    with warnings.catch_warnings():  # the command's warning settings end with it
        if quiet:
            # Our dependencies' notices of their own coming API changes are for us, not for
            # users; they would also break the one-line error messages.
            warnings.filterwarnings(
                "ignore", category=FutureWarning, module=r"(transformers|peft|accelerate)(\.|$)"
            )
            warnings.formatwarning = _one_line_warning
        try:
            module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
            prog = f"groupwise {argv[0]}"
            sub_parser = OneLineParser(prog=prog)
            module.add_arguments(sub_parser)
            mixed = argv[0] == "train"
            parse = sub_parser.parse_intermixed_args if mixed else sub_parser.parse_args
            return run_command(prog, module.run, parse(argv[1:]))
        finally:
            warnings.formatwarning = formatwarning


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    """A warning as users of the command read it: what and where, without the source line."""
    return f"{category.__name__} ({os.path.basename(filename)}:{lineno}): {message}\n"


if __name__ == "__main__":
    raise SystemExit(main())
