"""The SmolLM2 preset (configs/smollm2_arith.yaml, vLLM rollouts) of this checkout against the
same preset of an earlier commit of main: completion tokens per second of wall, the step's split
and peak memory, one run each, one after the other on the same machine.

Each side is `groupwise train --config configs/smollm2_arith.yaml` for `--steps` steps, in its own
process and run folder, from its own tree (the earlier commit is `git archive`d into a temporary
folder and imported through PYTHONPATH), with no held-out evaluation and no checkpoint. The bench
watches each run from outside, so both sides are measured the same way whatever their code logs:

- completion tokens per second of wall: the completion tokens of steps 2..N over the wall time
  between the moments step 1's and step N's lines reached metrics.jsonl (step 1 starts the
  engine's caches; a sampler that runs ahead counts only where it shortens the wall);
- from start: every step's completion tokens over the process's whole wall time, start-up and
  model loading included;
- peak memory: the largest sum of the proportional set size (PSS, /proc/PID/smaps_rollup) of the
  run's process and its children, sampled every 0.25 s;
- the split: medians over steps 2..N of metrics.jsonl's seconds_* (what each side logs).

    .venv-vllm/bin/python bench/versus_main.py --before 6043020 --steps 12

Writes bench/results/versus_main.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, load_average, markdown_table, write_results

SPLIT = [
    "seconds_step",
    "seconds_generation",
    "seconds_sampling_ahead",
    "seconds_training",
    "seconds_old_policy",
]
"""metrics.jsonl's split of a step (0 where a side does not log it)."""


@dataclass
class Watched:
    """What the bench saw of one run: each metrics.jsonl record with the wall time (s since the
    process started) at which its line appeared, the peak PSS of the process tree (bytes) and the
    process's whole wall time (s)."""

    records: list[dict] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    peak_pss: int = 0
    wall: float = 0.0


def tree_pids(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc/PID/task/TID/children."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):  # the task ended
                todo += [int(child) for child in (task / "children").read_text().split()]
    return pids


def tree_pss(pid: int) -> int:
    """The summed PSS (bytes) of `pid` and its descendants; processes that ended count 0."""
    total = 0
    for each in tree_pids(pid):
        try:
            for line in Path(f"/proc/{each}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            pass
    return total


def watch(tree: Path, steps: int, folder: Path, overrides: list[str]) -> Watched:
    """Runs the preset of the checkout at `tree` for `steps` steps into `folder` and watches it."""
    command = [
        sys.executable,
        "-m",
        "groupwise",
        "train",
        "--config",
        str(tree / "configs" / "smollm2_arith.yaml"),
        f"train.max_steps={steps}",
        "train.eval_every=0",
        f"train.save_every={steps + 1}",
        "train.progress=false",
        f"train.output_dir={folder}",
        *overrides,
    ]
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    log = folder.with_suffix(".log")
    seen = Watched()
    start = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)
        while process.poll() is None:
            seen.peak_pss = max(seen.peak_pss, tree_pss(process.pid))
            read_new_lines(folder / "metrics.jsonl", seen, time.perf_counter() - start)
            time.sleep(0.25)
    seen.wall = time.perf_counter() - start
    read_new_lines(folder / "metrics.jsonl", seen, seen.wall)
    if process.returncode != 0:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"{tree}: exit status {process.returncode}; the log ends:\n{tail}")
    return seen


def read_new_lines(path: Path, seen: Watched, now: float) -> None:
    """Appends the complete lines of `path` after the ones `seen` holds, stamped `now`."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    for line in lines[len(seen.records) :]:
        if line.endswith("\n"):
            seen.records.append(json.loads(line))
            seen.arrivals.append(now)


def row(name: str, seen: Watched) -> list[object]:
    """The table's row of one side."""
    later = seen.records[1:]
    tokens = sum(r["completion_tokens"] for r in later)
    steady = tokens / (seen.arrivals[-1] - seen.arrivals[0])
    from_start = sum(r["completion_tokens"] for r in seen.records) / seen.wall
    split = [statistics.median(r.get(key, 0.0) for r in later) for key in SPLIT]
    return [
        name,
        len(seen.records),
        steady,
        from_start,
        *split,
        tokens / len(later),
        seen.peak_pss / 2**30,
        seen.wall,
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="6043020", help="the earlier commit of main")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument(
        "--overrides", nargs="*", default=[], help="overrides of this checkout's preset"
    )
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps: at least 2 (step 1 is not counted in the steady rate)")
    before = load_average()
    with tempfile.TemporaryDirectory() as root:
        earlier = Path(root) / "before"
        earlier.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.before], cwd=REPO, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(earlier)], input=archive.stdout, check=True)
        sides = {
            f"main at {args.before}": watch(earlier, args.steps, Path(root) / "a", []),
            "this checkout": watch(REPO, args.steps, Path(root) / "b", args.overrides),
        }
    rows = [row(name, seen) for name, seen in sides.items()]
    ratio = rows[1][2] / rows[0][2]
    table = markdown_table(
        [
            "preset of",
            "steps",
            "completion tokens / s of wall, steps 2..N",
            "from start",
            "step (s)",
            "sampling (s)",
            "sampled ahead (s)",
            "training (s)",
            "no-grad pass (s)",
            "completion tokens / step",
            "peak PSS (GiB)",
            "process wall (s)",
        ],
        rows,
    )
    notes = f"This checkout's overrides: {args.overrides or 'none'}."
    write_results(
        "versus_main",
        "The SmolLM2 preset against an earlier main",
        [("One run each", table), ("Ratio", f"{ratio:.2f}x the completion tokens / s of wall")],
        load_before=before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
