"""Is a cut completion wrong because it is cut, and do right answers run longer than wrong ones?
Per run folder and window of steps: the share of training completions cut at
rollout.max_new_tokens, how often the cut and the finished ones were graded correct, and the mean
length in characters of the right and of the wrong ones (docs/guides/train.md, "What was tried
for a preset that learns at every seed"). The grading is the run's own (RUN/rollouts.jsonl's
`correct`): where a completion has no box, `groupwise` checking reads its last number, so a cut
completion can be right.

    python -m testbed.cut_completions runs/smollm2_arith_seed1 --window 10
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

from groupwise.records import read_jsonl

SHARES = ("cut", "right_cut", "right_finished", "boxed_cut")
"""The fractions of `windows`, shown in percent."""
LENGTHS = ("chars_right", "chars_wrong")
"""The mean lengths of `windows`, in characters."""


def windows(run: Path, window: int) -> Iterator[tuple[str, dict[str, float]]]:
    """("first-last" steps, values) for each `window` steps of RUN/rollouts.jsonl: `SHARES`
    ("cut": of all completions; "right_cut", "right_finished": of the cut and of the finished
    ones; "boxed_cut": of the cut ones) and `LENGTHS`; nan where there were none."""
    rows: dict[int, list[tuple[bool, bool, str]]] = {}
    batches, _ = read_jsonl(run / "rollouts.jsonl")
    for _, batch in batches:
        rows.setdefault((batch["step"] - 1) // window, []).extend(
            (bool(cut), bool(right), text)
            for cut, right, text in zip(
                batch["truncated"], batch["correct"], batch["completions"], strict=True
            )
        )
    for index in sorted(rows):
        completions = rows[index]
        cut = [(right, text) for is_cut, right, text in completions if is_cut]
        first = index * window + 1
        yield (
            f"{first}-{first + window - 1}",
            {
                "cut": len(cut) / len(completions),
                "right_cut": _mean([right for right, _ in cut]),
                "right_finished": _mean([right for is_cut, right, _ in completions if not is_cut]),
                "boxed_cut": _mean(["\\boxed" in text for _, text in cut]),
                "chars_right": _mean([len(text) for _, right, text in completions if right]),
                "chars_wrong": _mean([len(text) for _, right, text in completions if not right]),
            },
        )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def table(runs: Sequence[Path], window: int) -> str:
    """A markdown table: one row per run and window of steps (– where no completion was of
    that kind)."""
    lines = [
        "| run | steps | cut | right, cut | right, finished | cut with a box "
        "| characters, right | characters, wrong |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for steps, values in windows(run, window):
            cells = [_cell(values[key], f"{100 * values[key]:.1f} %") for key in SHARES]
            cells += [_cell(values[key], f"{values[key]:.0f}") for key in LENGTHS]
            lines.append(f"| {run.name} | {steps} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _cell(value: float, text: str) -> str:
    return "–" if math.isnan(value) else text


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders")
    parser.add_argument("--window", type=int, default=10, help="steps per row (default 10)")
    args = parser.parse_args(argv)
    print(table(args.runs, args.window))


if __name__ == "__main__":
    main()
