"""The `groupwise` command: a thin dispatcher over the subcommands.

Each subcommand lives beside the code it drives and exposes `add_arguments(parser)` and
`run(args) -> int`; they are imported only when chosen, so `groupwise --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("groupwise.train.command", "train a policy with GRPO / AMIR-GRPO / LENS / GSPO"),
    "eval": ("groupwise.evaluation.command", "sample n completions per problem and report pass@k"),
    "analyze": ("groupwise.analysis.command", "the AMIR-GRPO paper's diagnostics as figures"),
    "report": ("groupwise.report", "one page of training curves and eval tables for runs"),
    "summary": ("groupwise.train.summary", "training runs in one table (and a figure, --png)"),
}
# What a command raises for a user's mistake (a missing folder, a file that cannot be read, a
# bad value): one line on stderr and exit status 2, as train's and eval's own errors are;
# GROUPWISE_DEBUG=1 (or a command's --debug) shows the traceback instead.
USER_ERRORS = (OSError, ValueError, ImportError)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="groupwise", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv or ["--help"])
        return 2
    quiet = os.environ.get("GROUPWISE_DEBUG", "") in ("", "0")
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
            sub_parser = argparse.ArgumentParser(prog=f"groupwise {argv[0]}")
            module.add_arguments(sub_parser)
            args = sub_parser.parse_args(argv[1:])
            try:
                return int(module.run(args) or 0)
            except SystemExit as stop:  # raise SystemExit("message"): a user error
                if not isinstance(stop.code, str):
                    raise
                return _user_error(argv[0], stop.code)
            except USER_ERRORS as err:
                if not quiet or getattr(args, "debug", False):
                    raise
                return _user_error(argv[0], str(err))
        finally:
            warnings.formatwarning = formatwarning


def _user_error(command: str, message: str) -> int:
    """A user error as every command prints it: one line on stderr; exit status 2."""
    print(f"groupwise {command}: {' '.join(message.split())}", file=sys.stderr)
    return 2


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
