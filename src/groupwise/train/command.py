"""`groupwise train --config configs/X.yaml [key.sub=value ...] [--resume | --overwrite]`.

Before any model or data is loaded, the config is checked, this machine's side of it too
(train.preflight: devices, engine, processes, plugins), and the run folder opened
(`RunFolder`: locked, refused when it holds another run, compared with the saved config on
--resume). A start that ends before its first step (a missing model or data folder) removes
what it wrote, so the corrected command runs as typed. A user error (config, run folder, data
file, model) is one line on stderr, exit status 2; --debug or GROUPWISE_DEBUG=1 shows its
traceback instead.

Memory (train.memory_budget): a run whose settings need more memory than this machine has
available is refused before its sampler starts, in one line naming the setting to lower; a run
that still runs out (an allocation fails) ends in one line naming it, its checkpoints intact; a
--resume after a session that was killed (the kernel's out-of-memory killer) says what that
session held.

Exit status: 0 the run reached train.max_steps; 2 a user error; 1 training stopped on a
non-finite value (no step was taken on it) or ran out of memory; 128 + signal (130 Ctrl-C,
143 SIGTERM) the run was stopped by a signal after writing a checkpoint, so a scheduler sees
it did not finish.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from groupwise.config import ConfigError, documented_yaml
from groupwise.cpu_threads import announce
from groupwise.errors import NonFiniteError, RewardError
from groupwise.train.config import Config
from groupwise.train.memory_budget import unfinished_session
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
    killed = unfinished_session(config.train.output_dir) if args.resume else None
    folder = RunFolder.open(config.train.output_dir, config, mode)
    for note in [*([killed] if killed else []), *folder.notes]:
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
    announce("groupwise train")
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
    except (MemoryError, RuntimeError) as err:
        if debug or not _out_of_memory(err):
            raise
        print(_out_of_memory_line(err, config, trainer.step + 1, args), file=sys.stderr)
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


def _out_of_memory(err: BaseException) -> bool:
    """An allocation that failed: MemoryError, torch.OutOfMemoryError (a RuntimeError), or the
    CPU allocator's RuntimeError ("DefaultCPUAllocator: can't allocate memory")."""
    text = str(err)
    allocation = "can't allocate memory" in text or "out of memory" in text
    return isinstance(err, MemoryError) or allocation


def _out_of_memory_line(
    err: BaseException, config: Config, step: int, args: argparse.Namespace
) -> str:
    """One line: where it ran out, the settings to lower, the checkpoints, how to continue
    (both settings may change on --resume)."""
    group, micro = config.rollout.group_size, config.train.micro_batch_size
    half = max(group, micro // 2 // group * group)
    settings = f"train.micro_batch_size (now {micro})"
    if config.rollout.engine == "vllm":
        settings += f" or rollout.vllm_memory (now {config.rollout.vllm_memory:g})"
    first = " ".join(str(err).split())[:160]
    return (
        f"groupwise train: out of memory in step {step} ({first}); lower {settings}; the "
        f"checkpoints in {config.train.output_dir}/checkpoints are intact; continue with: "
        f"{resume_command(args)}" + (f" train.micro_batch_size={half}" if half < micro else "")
    )


def _user_error(err: BaseException) -> int:
    print(f"groupwise train: {err}", file=sys.stderr)
    return 2


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this run: the same config and overrides, --resume."""
    words = ["groupwise", "train"]
    if args.config:
        words += ["--config", args.config]
    return shlex.join([*words, *args.overrides, "--resume"])
