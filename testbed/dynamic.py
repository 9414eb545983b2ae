"""Drop them or learn from them: GRPO, GRPO + dynamic sampling, LENS, LENS + dynamic sampling
and AMIR-GRPO + LENS at an equal budget of completions sampled, on the learning testbed's
hard regime (`arith` level `long`, where the base policy is right on about 10 % of samples and
most groups of 8 are all-wrong: LENS's regime and dynamic sampling's worst case).

Every run is configs/testbed_arith.yaml with the method's overrides and the same budget: it
stops after the step at which its completions sampled reach --budget (train.max_completions;
with dynamic sampling a step samples several draws of 16 questions, so such a run takes fewer
steps). The learning rate is constant (no warm-up): a schedule over steps would decay at a
different point of the budget in runs with and without dynamic sampling. Each run evaluates
its policy on the same held-out `arith` test problems with the same sampling seeds every
--eval-every steps and at its end (train.eval_every), so the final accuracies are paired over
seeds and over problems (testbed/stats.py).

Runs go one at a time (a nice'd subprocess, one torch thread), seed-major, so a stopped
bench has whole seeds of every method; the same command resumes it: complete runs are
skipped, a started one continues from its checkpoint (`groupwise train --resume`).

    nice python -m testbed.dynamic                   # the comparison (about an hour)
    python -m testbed.dynamic --report-only          # the results of the runs so far
    python -m testbed.dynamic --seeds 0 --budget 512 --output /tmp/ld   # a smoke run

Outputs: OUTPUT/METHOD/seedS/ (the run folders) and, with --results (default: testbed/results
when the output is the default), dynamic_sampling.md, dynamic_sampling.json and
dynamic_sampling.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from groupwise.report.summary import signed_points

from . import runs
from .stats import difference_to_reference

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "testbed_arith.yaml"
RESULTS = REPO / "testbed" / "results"
DEFAULT_OUTPUT = REPO / "runs" / "learning-dynamic"
REFERENCE = "GRPO"

METHODS: dict[str, list[str]] = {
    "GRPO": [],
    "GRPO + DS": ["rollout.dynamic_sampling=true"],
    "LENS": ["algorithm.advantage=lens"],
    "LENS + DS": ["algorithm.advantage=lens", "rollout.dynamic_sampling=true"],
    "AMIR-GRPO + LENS": ["algorithm.advantage=lens", "algorithm.amir=true"],
}
"""Each method's overrides of the shared settings (`common_overrides`)."""


def common_overrides(args: argparse.Namespace) -> list[str]:
    """What every run shares beyond configs/testbed_arith.yaml: the level, the budget, the
    constant learning rate, the held-out evaluation."""
    heldout = {
        "benchmark": "arith",
        "split": "test",
        "options": {"level": args.level, "size": args.eval_problems},
    }
    return [
        f"data.options.level={args.level}",
        f"train.max_completions={args.budget}",
        "train.max_steps=1000",
        "optim.schedule=constant",
        "optim.warmup_ratio=0.0",
        f"train.eval_every={args.eval_every}",
        f"train.eval_samples={args.eval_samples}",
        f"data.heldout={json.dumps(heldout)}",
        f"train.save_every={args.eval_every}",
        "train.progress=false",
    ]


def run_dir(output: Path, method: str, seed: int) -> Path:
    return output / method.replace(" ", "").replace("+", "_") / f"seed{seed}"


def planned_runs(args: argparse.Namespace) -> list[runs.Run]:
    """Every run of the bench, seed-major: a nice'd process with one torch thread each."""
    environment = runs.python_environment(REPO, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "groupwise", "train", "--config", str(CONFIG)]
    return [
        runs.Run(
            f"{method}|{seed}",
            run_dir(args.output, method, seed),
            [*command, *common_overrides(args), *METHODS[method], f"train.seed={seed}"],
            environment,
            nice=True,
        )
        for seed in args.seeds
        for method in METHODS
    ]


def read_run(folder: Path) -> dict[str, Any]:
    """A run's curve (held-out accuracy against completions sampled), its final per-problem
    accuracies (testbed.runs.read_run), and what its sampling cost."""
    run = runs.read_run(folder)
    lines = run.pop("metrics")
    return {
        **run,
        "draws_per_step": float(np.mean([line.get("draws", 1) for line in lines])),
        "dropped_all_wrong": sum(line.get("groups_dropped_all_wrong", 0) for line in lines),
        "dropped_all_correct": sum(line.get("groups_dropped_all_correct", 0) for line in lines),
        "filled": sum(line.get("groups_filled", 0) for line in lines),
    }


def report(args: argparse.Namespace, wall: dict[str, float]) -> dict[str, Any]:
    """The table, the figure and the JSON of the complete runs (paired over the seeds every
    method has completed)."""
    complete = runs.completed(
        METHODS, args.seeds, lambda method, seed: run_dir(args.output, method, seed), read_run
    )
    seeds = [s for s in args.seeds if all(s in complete[m] for m in METHODS)]
    if not seeds:
        print("no seed is complete for every method yet")
        return {}
    results = {"seeds": seeds, "budget": args.budget, "level": args.level, "methods": {}}
    reference = np.array([complete[REFERENCE][s]["per_problem"] for s in seeds])
    for method in METHODS:
        mine = [complete[method][s] for s in seeds]
        per_problem = np.array([run["per_problem"] for run in mine])
        entry = {
            "overrides": METHODS[method],
            "final_accuracy": [run["final_accuracy"] for run in mine],
            "completions": [run["completions"] for run in mine],
            "steps": [run["steps"] for run in mine],
            "completions_per_trained_group": float(
                np.mean([run["completions"] / (16 * run["steps"]) for run in mine])
            ),
            "draws_per_step": float(np.mean([run["draws_per_step"] for run in mine])),
            "groups_filled": int(sum(run["filled"] for run in mine)),
            "groups_dropped_all_wrong": int(sum(run["dropped_all_wrong"] for run in mine)),
            "groups_dropped_all_correct": int(sum(run["dropped_all_correct"] for run in mine)),
            "curves": [run["curve"] for run in mine],
            "minutes": [wall.get(f"{method}|{s}") for s in seeds],
        }
        if method != REFERENCE and len(seeds) >= 2:
            entry["difference"] = difference_to_reference(per_problem, reference)
        results["methods"][method] = entry
    target = args.results or args.output
    runs.write_results(target, "dynamic_sampling", results, markdown(args, results), figure)
    return results


def markdown(args: argparse.Namespace, results: dict[str, Any]) -> str:
    """The results page: settings, the table, the command."""
    seeds = results["seeds"]
    lines = [
        "# Drop them or learn from them: dynamic sampling beside LENS, at equal completions",
        "",
        f"- written {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by "
        "`testbed/dynamic.py`; machine: 2 cores shared, each run one nice'd process "
        "with one torch thread",
        f"- command: `nice python -m testbed.dynamic --budget {args.budget} --seeds "
        f"{' '.join(map(str, args.seeds))} --eval-every {args.eval_every} --eval-problems "
        f"{args.eval_problems} --eval-samples {args.eval_samples}`",
        f"- every run: configs/testbed_arith.yaml at level `{args.level}`, 16 questions x 8 "
        f"completions per step (per draw), stops after the step at which its completions "
        f"sampled reach {args.budget}; lr 1e-4 constant, no warm-up; binary reward",
        f"- held-out: the first {args.eval_problems} `arith` test problems of the level, "
        f"{args.eval_samples} samples each at temperature 1.0, the same for every run; "
        f"accuracy = fraction of samples correct (pass@1); seeds {seeds}",
        "",
        "| method | overrides | completions sampled | steps | completions per trained group "
        "| held-out accuracy (%) | Δ to GRPO (points): mean [seeds] [problems] | CPU min/run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = [m["curves"][0][0][1] for m in results["methods"].values() if m["curves"][0]]
    for method, entry in results["methods"].items():
        accuracy = 100 * np.array(entry["final_accuracy"])
        overrides = ", ".join(f"`{o}`" for o in entry["overrides"]) or "none"
        difference = "–"
        if "difference" in entry:
            d = entry["difference"]
            difference = (
                f"{signed_points(d['mean'])} "
                f"[{signed_points(d['seed_low'])}, {signed_points(d['seed_high'])}] "
                f"[{signed_points(d['problem_low'])}, {signed_points(d['problem_high'])}]"
            )
            if d["distinguishable"]:
                difference = f"**{difference}**"
        lines.append(
            f"| {method} | {overrides} | {np.mean(entry['completions']):.0f} | "
            f"{np.mean(entry['steps']):.1f} | {entry['completions_per_trained_group']:.1f} | "
            f"{accuracy.mean():.1f} ± {accuracy.std(ddof=1) if len(accuracy) > 1 else 0:.1f} | "
            f"{difference} | {_cpu(entry):.1f} |"
        )
    total = sum(_cpu(entry) * len(entry["minutes"]) for entry in results["methods"].values())
    lines += [
        "",
        f"CPU time of all the runs: {total:.0f} min (user + system of the training processes).",
        f"Base policy (step 0 of every run): held-out accuracy {100 * base[0]:.1f} %.",
        "Accuracy: mean ± sd over seeds. Δ: the paired difference to GRPO with its 95 % "
        "t-interval over seeds and its 95 % bootstrap interval over problems; **bold**: both "
        "exclude zero. Completions per trained group: completions sampled / (16 x steps); 8 "
        "without dynamic sampling.",
        "",
    ]
    return "\n".join(lines)


def _cpu(entry: dict[str, Any]) -> float:
    """A method's mean CPU minutes per run (nan where a run's were not recorded)."""
    spent = [m["cpu"] for m in entry["minutes"] if isinstance(m, dict)]
    return float(np.mean(spent)) if spent else float("nan")


def figure(results: dict[str, Any], path: Path) -> None:
    """Held-out accuracy against completions sampled, mean over seeds per method (each seed's
    curve interpolated on a common grid of completions)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for method, entry in results["methods"].items():
        grid = np.linspace(0, min(c[-1][0] for c in entry["curves"]), 40)
        values = [np.interp(grid, *zip(*curve, strict=True)) for curve in entry["curves"]]
        ax.plot(grid, 100 * np.mean(values, axis=0), label=method)
    ax.set_xlabel("completions sampled")
    ax.set_ylabel("held-out accuracy (%)")
    ax.set_title(f"arith `{results['level']}`, mean over seeds {results['seeds']}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budget", type=int, default=3072, help="completions per run")
    parser.add_argument("--level", default="long")
    parser.add_argument("--eval-every", type=int, default=8)
    parser.add_argument("--eval-problems", type=int, default=150)
    parser.add_argument("--eval-samples", type=int, default=4)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    if args.results is None and args.output == DEFAULT_OUTPUT:
        args.results = RESULTS
    wall = runs.read_wall(args.output)
    if not args.report_only:
        wall = runs.run_all(planned_runs(args), args.output, REPO)
    report(args, wall)


if __name__ == "__main__":
    main()
