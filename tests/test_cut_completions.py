"""testbed/cut_completions.py: the share cut, how often cut and finished completions were right
and how long right and wrong ones were, per window of steps, counted by hand on a small
rollouts.jsonl."""

from __future__ import annotations

import json
import math
from pathlib import Path

from testbed.cut_completions import table, windows


def write_run(folder: Path, batches: list[dict]) -> Path:
    folder.mkdir()
    with open(folder / "rollouts.jsonl", "w", encoding="utf-8") as out:
        for batch in batches:
            out.write(json.dumps(batch) + "\n")
    return folder


def batch(step: int, truncated: list[int], correct: list[int], texts: list[str]) -> dict:
    return {
        "step": step,
        "truncated": [bool(t) for t in truncated],
        "correct": [bool(c) for c in correct],
        "completions": texts,
    }


def test_shares_per_window_of_steps(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "run",
        [
            # steps 1-2: 8 completions, 3 cut (1 right, 1 with a box), 5 finished (2 right)
            batch(
                1,
                [True, True, False, False],
                [True, False, True, False],
                ["1", "\\boxed{2}", "3", "4"],
            ),
            batch(
                2, [True, False, False, False], [False, True, False, False], ["5", "6", "7", "8"]
            ),
            # step 3: everything cut, nothing right: the finished share has no completions
            batch(3, [1, 1], [0, 0], ["a", "b"]),
        ],
    )
    rows = list(windows(run, window=2))
    assert [steps for steps, _ in rows] == ["1-2", "3-4"]
    first = rows[0][1]
    assert first["cut"] == 3 / 8
    assert first["right_cut"] == 1 / 3
    assert first["right_finished"] == 2 / 5
    assert first["boxed_cut"] == 1 / 3
    # right: "1", "3", "6" (1 character each); wrong: "\\boxed{2}" (9), "4", "5", "7", "8"
    assert first["chars_right"] == 1.0
    assert first["chars_wrong"] == (9 + 4) / 5
    second = rows[1][1]
    assert second["cut"] == 1.0 and second["right_cut"] == 0.0
    assert math.isnan(second["right_finished"]) and math.isnan(second["chars_right"])
    lines = table([run], window=2).splitlines()
    assert lines[2] == "| run | 1-2 | 37.5 % | 33.3 % | 40.0 % | 33.3 % | 1 | 3 |"
    assert lines[3] == "| run | 3-4 | 100.0 % | 0.0 % | – | 0.0 % | – | 1 |"
