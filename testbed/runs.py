"""A bench's training runs: `groupwise train` subprocesses, one at a time, resumable.

A run whose folder has `final/` is complete and skipped; a started one (a `checkpoints/`
folder) continues with `--resume`; any other folder is started over. Each run's wall and CPU
minutes (user + system of its process) add up over invocations in the bench's `wall.json`, so
a bench stopped and run again reports what its runs cost in all. Used by testbed/dynamic.py and
testbed/smollm2.py.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Run:
    """One run of a bench: `key` names it in wall.json ("METHOD|SEED"), `folder` is its
    train.output_dir, `command` the `groupwise train` command without output_dir and without
    --resume / --overwrite, `environment` its process's environment, `nice` whether it runs
    nice'd."""

    key: str
    folder: Path
    command: Sequence[str]
    environment: Mapping[str, str]
    nice: bool = False


def is_complete(folder: Path) -> bool:
    """Whether the run in `folder` reached its end (`groupwise train` writes final/ last)."""
    return (folder / "final").is_dir()


def train(run: Run, cwd: Path) -> tuple[float, float]:
    """`run` to its end, resumed where its folder has a checkpoint; its wall and CPU seconds.
    A failed run raises subprocess.CalledProcessError (its folder keeps its checkpoints)."""
    command = [*run.command, f"train.output_dir={run.folder}"]
    command.append("--resume" if (run.folder / "checkpoints").is_dir() else "--overwrite")
    if run.nice:
        command = ["nice", *command]
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, env=dict(run.environment), cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return time.perf_counter() - started, cpu


def read_wall(output: Path) -> dict[str, dict[str, float]]:
    """wall.json of the bench's output folder: {key: {"wall": minutes, "cpu": minutes}}."""
    log = output / "wall.json"
    return json.loads(log.read_text()) if log.is_file() else {}


def run_all(runs: Sequence[Run], output: Path, cwd: Path) -> dict[str, dict[str, float]]:
    """Every run not complete yet, in order, each one's minutes added to OUTPUT/wall.json as it
    ends; returns the whole log."""
    wall = read_wall(output)
    for run in runs:
        if is_complete(run.folder):
            continue
        seconds, cpu = train(run, cwd)
        spent = wall.get(run.key, {"wall": 0.0, "cpu": 0.0})
        wall[run.key] = {"wall": spent["wall"] + seconds / 60, "cpu": spent["cpu"] + cpu / 60}
        output.mkdir(parents=True, exist_ok=True)
        (output / "wall.json").write_text(json.dumps(wall, indent=1))
    return wall


def python_environment(repo: Path, **extra: str) -> dict[str, str]:
    """This process's environment with the repository's src/ first on PYTHONPATH, plus
    `extra`."""
    return {**os.environ, "PYTHONPATH": str(repo / "src"), **extra}


def read_run(folder: Path) -> dict[str, Any]:
    """A complete run's held-out results and training log.

    Returns {"steps", "completions", "curve", "before", "final_accuracy", "per_problem",
    "per_problem_before", "metrics"}: curve is [(completions sampled, held-out
    accuracy)] at each evaluation (step 0 first where there is one); per_problem the final
    evaluation's accuracy of each held-out problem (fraction of its samples correct), in
    problem order; metrics the lines of metrics.jsonl."""
    from groupwise.run_reader import METRICS_FILE, read_heldout, read_metrics

    lines = read_metrics(folder / METRICS_FILE)
    heldout = read_heldout(folder)
    by_step = {row["step"]: row for row in heldout}
    sampled, curve = 0, []
    if 0 in by_step:
        curve.append((0, by_step[0]["accuracy"]))
    for line in lines:
        sampled += line["completions_sampled"]
        if line["step"] in by_step:
            curve.append((sampled, by_step[line["step"]]["accuracy"]))
    first, final = heldout[0], heldout[-1]
    return {
        "steps": len(lines),
        "completions": sampled,
        "curve": curve,
        "before": first["accuracy"] if first["step"] == 0 else None,
        "final_accuracy": final["accuracy"],
        "per_problem": _per_problem(final),
        "per_problem_before": _per_problem(first) if first["step"] == 0 else None,
        "metrics": lines,
    }


def _per_problem(evaluation: Mapping[str, Any]) -> list[float]:
    """Each problem's fraction of correct samples in one held-out evaluation."""
    return list(np.asarray(evaluation["correct"], dtype=float) / evaluation["n"])


def completed(
    methods: Iterable[str],
    seeds: Iterable[int],
    folder: Callable[[str, int], Path],
    read: Callable[[Path], dict[str, Any]] = read_run,
) -> dict[str, dict[int, dict[str, Any]]]:
    """{method: {seed: read(its folder)}} of the runs that are complete, seeds in order."""
    seeds = list(seeds)
    return {
        method: {
            seed: read(folder(method, seed)) for seed in seeds if is_complete(folder(method, seed))
        }
        for method in methods
    }


def write_results(
    target: Path,
    stem: str,
    results: dict[str, Any],
    page: str,
    figure: Callable[[dict[str, Any], Path], None],
) -> None:
    """A bench's results in `target`: STEM.json (results), STEM.png (figure(results, path)) and
    STEM.md (page)."""
    target.mkdir(parents=True, exist_ok=True)
    (target / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    figure(results, target / f"{stem}.png")
    (target / f"{stem}.md").write_text(page)
