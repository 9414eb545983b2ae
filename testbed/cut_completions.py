"""Is a cut completion wrong because it is cut? Per run folder and window of steps: the share
of training completions cut at rollout.max_new_tokens, and how often the cut ones and the
finished ones were graded correct (docs/guides/train.md, "A real model: SmolLM2 on
arithmetic"). The grading is the run's own (RUN/rollouts.jsonl's `correct`): where a completion
has no box, `groupwise` checking reads its last number, so a cut completion can be right.

    python -m testbed.cut_completions runs/smollm2_arith_seed1 --window 10
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

from groupwise.records import read_jsonl


def windows(run: Path, window: int) -> Iterator[tuple[str, dict[str, float]]]:
    """("first-last" steps, {"cut", "right_cut", "right_finished", "boxed_cut"} as fractions)
    for each `window` steps of RUN/rollouts.jsonl; a fraction of no completions is nan."""
    counts: dict[int, list[int]] = {}
    batches, _ = read_jsonl(run / "rollouts.jsonl")
    for _, batch in batches:
        slot = counts.setdefault((batch["step"] - 1) // window, [0] * 5)
        for cut, right, text in zip(
            batch["truncated"], batch["correct"], batch["completions"], strict=True
        ):
            slot[0] += 1
            slot[1] += cut
            slot[2] += bool(right) and cut
            slot[3] += bool(right) and not cut
            slot[4] += cut and "\\boxed" in text
    for index in sorted(counts):
        total, cut, right_cut, right_finished, boxed_cut = counts[index]
        first = index * window + 1
        yield (
            f"{first}-{first + window - 1}",
            {
                "cut": cut / total,
                "right_cut": right_cut / cut if cut else float("nan"),
                "right_finished": right_finished / (total - cut) if total > cut else float("nan"),
                "boxed_cut": boxed_cut / cut if cut else float("nan"),
            },
        )


def table(runs: Sequence[Path], window: int) -> str:
    """A markdown table: one row per run and window of steps (percent; – where no completion
    was of that kind)."""
    lines = [
        "| run | steps | cut | right, cut | right, finished | cut with a box |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        for steps, share in windows(run, window):
            cells = " | ".join(
                "–" if math.isnan(value) else f"{100 * value:.1f} %" for value in share.values()
            )
            lines.append(f"| {run.name} | {steps} | {cells} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders")
    parser.add_argument("--window", type=int, default=10, help="steps per row (default 10)")
    args = parser.parse_args(argv)
    print(table(args.runs, args.window))


if __name__ == "__main__":
    main()
