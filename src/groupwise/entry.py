"""How every entry point reports a user's mistake (the `groupwise` command and each
`python -m groupwise...` module): one line on stderr, `PROG: message`, and exit status 2
(docs/design.md, "Choices already made").

A mistake is a command-line argument argparse refuses, `raise SystemExit("message")`, or one of
USER_ERRORS (a missing folder, a file that cannot be read, a bad value, a missing optional
package). GROUPWISE_DEBUG=1 (or a command's --debug) shows the traceback instead. The module
imports nothing of groupwise, so that every layer's entry point can use it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

__all__ = ["USER_ERRORS", "OneLineParser", "debugging", "run_command", "user_error"]

USER_ERRORS = (OSError, ValueError, ImportError)


def debugging() -> bool:
    """GROUPWISE_DEBUG is set (to anything but 0): tracebacks instead of one-line errors."""
    return os.environ.get("GROUPWISE_DEBUG", "") not in ("", "0")


def user_error(prog: str, message: str) -> int:
    """Print a user error as every entry point does: `PROG: message` on one line of stderr
    (white space of the message folded); returns the exit status, 2."""
    print(f"{prog}: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose refusals are one line (`PROG: message; see PROG --help`), exit
    status 2, instead of argparse's usage block; --help prints the usage as usual. Its
    subparsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        user_error(self.prog, f"{message}; see {self.prog} --help")
        raise SystemExit(2)


def run_command(
    prog: str,
    run: Callable[[argparse.Namespace], int | None],
    args: argparse.Namespace,
) -> int:
    """`run(args)` as an entry point runs it: its exit status, or a user error (module
    docstring) as one line and 2; a traceback when debugging or with args.debug."""
    try:
        return int(run(args) or 0)
    except SystemExit as stop:  # raise SystemExit("message"): a user error
        if not isinstance(stop.code, str):
            raise
        return user_error(prog, stop.code)
    except USER_ERRORS as err:
        if debugging() or getattr(args, "debug", False):
            raise
        return user_error(prog, str(err))


def main_of(
    prog: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int | None],
    argv: Sequence[str] | None = None,
    description: str | None = None,
) -> int:
    """A module's `main`: parse `argv` (default sys.argv[1:]) with the module's arguments on a
    OneLineParser named `prog`, then `run_command`."""
    parser = OneLineParser(prog=prog, description=description)
    add_arguments(parser)
    return run_command(prog, run, parser.parse_args(argv))
