"""`groupwise view FOLDER [FOLDER2] --output PAGE.html`: one self-contained page of a training
run (its steps, each step's groups and AMIR pairs, LENS's calibrated negatives), an evaluation
folder (problems, samples, pass@k), or two folders side by side, the problems one solves and
the other does not first (docs/guides/view.md).

    groupwise view runs/amir_lens --output amir_lens.html
    groupwise view runs/eval-base runs/eval-trained --output learned.html
    groupwise view runs/long --max-steps 20 --output long.html     # 20 evenly spaced steps
    groupwise view runs/long --steps 1,500,1000 --output three.html
    groupwise view verl_rollouts/ --output verl.html    # trainer.rollout_data_dir's N.jsonl
    groupwise view runs/trl --output trl.html    # GroupwiseGRPOConfig(log_rollouts=True)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from groupwise.view.page import render_page
from groupwise.view.records import compare, folder_kind, read_eval, read_run
from groupwise.view.verl_dumps import read_verl_dumps


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`groupwise view`'s arguments."""
    parser.description = __doc__.splitlines()[0]
    parser.add_argument(
        "folder",
        type=Path,
        metavar="FOLDER",
        help="a run folder, an evaluation folder or verl's trainer.rollout_data_dir",
    )
    parser.add_argument(
        "second",
        type=Path,
        nargs="?",
        metavar="FOLDER2",
        help="a second folder: the same problems side by side",
    )
    parser.add_argument("--output", "-o", type=Path, required=True, help="the page (.html)")
    parser.add_argument(
        "--steps",
        type=_steps,
        default=None,
        help="a run's steps whose groups the page carries, e.g. 1,50,100 (default: --max-steps)",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=50,
        help="at most this many steps' groups, evenly spaced, first and last included "
        "(default 50; 0: every step); the steps list always has every step",
    )


def _steps(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of step numbers: {text!r}") from None


def read_folder(folder: Path, steps: list[int] | None, max_steps: int) -> dict[str, Any]:
    """A folder's page model (a run's or an evaluation's); a ValueError for anything else."""
    kind = folder_kind(folder)
    if kind == "run":
        return read_run(folder, steps, max_steps)
    if kind == "verl":
        return read_verl_dumps(folder, steps, max_steps)
    return read_eval(folder)


def run(args: argparse.Namespace) -> int:
    """Writes the page; a folder that is neither kind, or a line that cannot be read, raises a
    ValueError the entry point prints as one line (exit 2)."""
    if args.output.suffix.lower() not in (".html", ".htm"):
        raise SystemExit(f"--output {args.output}: the page is HTML; name it PAGE.html")
    model = read_folder(args.folder, args.steps, args.max_steps)
    if args.second is not None:
        model = compare(model, read_folder(args.second, args.steps, args.max_steps))
    text = render_page(model)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    size = len(text.encode("utf-8"))
    print(f"wrote {args.output} ({size / 1e6:.2f} MB); open it in a browser", file=sys.stderr)
    return 0
