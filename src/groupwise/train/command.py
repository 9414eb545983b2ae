"""`groupwise train --config configs/X.yaml [key.sub=value ...] [--resume | --overwrite]`.

Before any model or data is loaded, the config is checked, this machine's side of it too
(train.preflight: devices, engine, processes, plugins), and the run folder opened
(`RunFolder`: locked, refused when it holds another run, compared with the saved config on
--resume). A start that ends before its first step (a missing model or data folder) removes
what it wrote, so the corrected command runs as typed. A user error (config, run folder, data
file, model) is one line on stderr, exit status 2; --debug or GROUPWISE_DEBUG=1 shows its
traceback instead.

Exit status: 0 the run reached train.max_steps; 2 a user error; 1 training stopped on a
non-finite value (no step was taken on it); 128 + signal (130 Ctrl-C, 143 SIGTERM) the run was
stopped by a signal after writing a checkpoint, so a scheduler sees it did not finish.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from groupwise.config import ConfigError, documented_yaml
from groupwise.errors import NonFiniteError, RewardError
from groupwise.train.config import Config
from groupwise.train.preflight import load_run_config
from groupwise.train.run_folder import RunFolder, RunFolderError

DEBUG_ENV = "GROUPWISE_DEBUG"
# What loading a model, a tokenizer or a data file raises for a user's mistake (an unknown
# model, a missing file, a malformed record: the messages name the path, or the file and line).
SETUP_ERRORS = (ValueError, OSError, ImportError)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Train a policy with GRPO, AMIR-GRPO, LENS or GSPO."
    parser.add_argument("--config", help="YAML preset (see configs/); defaults apply without it")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key.sub=value",
        help="override any option, e.g. model.name=tiny-random train.max_steps=2",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in train.output_dir from its newest intact checkpoint, with the "
        "settings it was started with (a new or empty folder starts the run)",
    )
    mode.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the run in train.output_dir and start over",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config as YAML, each option with its documentation, and exit",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of an error instead of one line (or set {DEBUG_ENV}=1)",
    )


def run(args: argparse.Namespace) -> int:
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        config = load_run_config(args.config, args.overrides)
        if args.print_config:
            print(documented_yaml(config), end="")
            return 0
        folder = _open_run_folder(config, args)
    except (ConfigError, RunFolderError) as err:
        if debug:
            raise
        return _user_error(err)
    try:
        return _train(config, args, folder, debug)
    except KeyboardInterrupt:  # a second Ctrl-C: no checkpoint was written
        print(
            "groupwise train: interrupted; continue from the last checkpoint with: "
            + resume_command(args),
            file=sys.stderr,
        )
        return 128 + signal.SIGINT
    finally:
        if folder is not None:
            # A start that failed before its first step leaves nothing that blocks the
            # corrected command (docs/guides/train.md, "A start that failed").
            folder.close(discard_unstarted=True)


def _open_run_folder(config: Config, args: argparse.Namespace) -> RunFolder | None:
    """The opened (locked) run folder, its notes printed; None in the processes other than rank
    0 of a distributed run (torchrun / accelerate set RANK), which only read the folder."""
    if os.environ.get("RANK", "0") != "0":
        return None
    mode = "resume" if args.resume else "overwrite" if args.overwrite else "fresh"
    folder = RunFolder.open(config.train.output_dir, config, mode)
    for note in folder.notes:
        print(f"groupwise train: {note}", file=sys.stderr)
    return folder


def _train(config: Config, args: argparse.Namespace, folder: RunFolder | None, debug: bool) -> int:
    from groupwise.train.trainer import Trainer

    try:
        trainer = Trainer(config, resume=args.resume, folder=folder)
    except SETUP_ERRORS as err:
        if debug:
            raise
        return _user_error(err)
    try:
        final = trainer.train()
    except RewardError as err:  # a reward plugin's mistake: the user's to fix
        if debug:
            raise
        return _user_error(err)
    except NonFiniteError as err:
        if debug:
            raise
        print(
            f"groupwise train: training stopped: {err}. No optimizer step was taken on it; "
            f"the checkpoints in {trainer.run_dir / 'checkpoints'} are as they were",
            file=sys.stderr,
        )
        return 1
    stopped_by = trainer.stop_signal
    if stopped_by is not None:
        print(
            f"groupwise train: stopped by {signal.Signals(stopped_by).name} at step "
            f"{trainer.step}, checkpoint written; continue with: {resume_command(args)}",
            file=sys.stderr,
        )
        return 128 + int(stopped_by)
    print(f"run folder: {trainer.run_dir}")
    print(f"metrics:    {trainer.log.path}")
    print(f"weights:    {final}")
    if trainer.dist.is_main:
        from groupwise.report.plots import plot_run
        from groupwise.report.summary import summarize, summary_text

        print(summary_text(summarize(trainer.run_dir)))
        print(f"figure:     {plot_run(trainer.run_dir)}")
    return 0


def _user_error(err: BaseException) -> int:
    print(f"groupwise train: {err}", file=sys.stderr)
    return 2


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this run: the same config and overrides, --resume."""
    words = ["groupwise", "train"]
    if args.config:
        words += ["--config", args.config]
    return shlex.join([*words, *args.overrides, "--resume"])
