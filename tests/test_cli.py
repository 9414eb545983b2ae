"""The `groupwise` dispatcher: how its commands show warnings."""

from __future__ import annotations

import argparse
import sys
import types
import warnings

import pytest

from groupwise import cli


@pytest.mark.parametrize("debug", ["", "1"])
def test_warnings_are_one_line_without_source(monkeypatch: pytest.MonkeyPatch, debug: str) -> None:
    """During a command, a library warning (e.g. lambda_reg at its bound) is one line naming its
    category and file, not Python's two lines with the source of the warning call; with
    GROUPWISE_DEBUG=1, Python's own format."""
    before = warnings.formatwarning
    monkeypatch.setenv("GROUPWISE_DEBUG", debug)
    command = types.ModuleType("groupwise_test_command")
    seen = []
    command.add_arguments = lambda parser: None

    def run(args: argparse.Namespace) -> int:
        seen.append(warnings.formatwarning("lambda sits at its floor", UserWarning, "/x/p.py", 3))
        return 0

    command.run = run
    monkeypatch.setitem(sys.modules, command.__name__, command)
    monkeypatch.setitem(cli.SUBCOMMANDS, "probe", (command.__name__, "test"))
    assert cli.main(["probe"]) == 0
    if debug:
        assert seen == ["/x/p.py:3: UserWarning: lambda sits at its floor\n"]
    else:
        assert seen == ["UserWarning (p.py:3): lambda sits at its floor\n"]
    assert warnings.formatwarning is before  # the command's format ends with it
