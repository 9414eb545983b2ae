"""The methods on a real model: GRPO, AMIR-GRPO, LENS and AMIR-GRPO + LENS on
configs/smollm2_arith.yaml (SmolLM2-135M-Instruct + LoRA 16/16, one operation on one-digit
numbers, 40 steps of 4 questions x 8 completions), over seeds, compared on the preset's held-out
questions (its task's whole test split, 28 questions x 16 samples).

Every run is the preset with the method's overrides (`METHODS`) and `train.seed`; each
evaluates its policy before its first step and after its last on the same problems, so the
final accuracies are paired with GRPO's over seeds and over problems (testbed/stats.py), and
each run's gain is paired with its own step 0. Runs go one at a time, seed-major, so a stopped
bench has whole seeds first; the same command resumes it (testbed/runs.py). Training runs in
.venv-vllm (vLLM rollouts) where scripts/setup_vllm.sh made it, else in this Python. 6 to 9
minutes a run on 2 cores with avx512_bf16 and vLLM, 20 to 22 on 2 AVX2 cores (float32),
held-out evaluations included (docs/guides/train.md, "A real model: SmolLM2 on arithmetic").

    python -m testbed.smollm2                      # seeds 0, 1 and 2 (12 runs, 1.5 to 4.5 hours)
    python -m testbed.smollm2 --seeds 3            # a fourth seed (4 more runs)
    python -m testbed.smollm2 --seeds 2 --methods GRPO "AMIR-GRPO + LENS"   # some of them
    python -m testbed.smollm2 --report-only        # the results of the runs so far

Outputs: OUTPUT/seedS/METHOD/ (the run folders; OUTPUT is runs/smollm2-methods) and, with
--results (default: testbed/results when the output is the default), smollm2_methods.md,
smollm2_methods.json and smollm2_methods.png.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from groupwise.report.summary import signed_points

from . import runs
from .stats import difference_to_reference, seeds_needed

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "smollm2_arith.yaml"
RESULTS = REPO / "testbed" / "results"
DEFAULT_OUTPUT = REPO / "runs" / "smollm2-methods"
VLLM_ENV = REPO / ".venv-vllm"
REFERENCE = "GRPO"

METHODS: dict[str, tuple[str, list[str]]] = {
    "GRPO": ("grpo", ["algorithm.amir=false", "algorithm.advantage=grpo"]),
    "AMIR-GRPO": ("amir", ["algorithm.amir=true", "algorithm.advantage=grpo"]),
    "LENS": ("lens", ["algorithm.amir=false", "algorithm.advantage=lens"]),
    "AMIR-GRPO + LENS": ("amir_lens", ["algorithm.amir=true", "algorithm.advantage=lens"]),
}
"""Each method's folder name and its overrides of the preset (the preset itself is AMIR-GRPO +
LENS)."""


def run_dir(output: Path, method: str, seed: int) -> Path:
    return output / f"seed{seed}" / METHODS[method][0]


def training_python() -> str:
    """The Python that trains: .venv-vllm's where its set-up finished, else this one."""
    if (VLLM_ENV / ".setup-stamp").is_file():
        return str(VLLM_ENV / "bin" / "python")
    return sys.executable


def planned_runs(args: argparse.Namespace) -> list[runs.Run]:
    """Every run of the bench, seed-major, in the order of --methods within a seed."""
    command = [training_python(), "-m", "groupwise", "train", "--config", str(CONFIG)]
    return [
        runs.Run(
            f"{method}|{seed}",
            run_dir(args.output, method, seed),
            [*command, *METHODS[method][1], f"train.seed={seed}", *args.overrides],
            runs.python_environment(REPO),
        )
        for seed in args.seeds
        for method in args.methods
    ]


MEAN_KEYS = (
    "group_mixed",
    "group_all_wrong",
    "group_all_wrong_active",
    "pairs_per_group",
    "training_minutes",
)
"""The mechanisms averaged over seeds in the results page."""


def mechanisms(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What a run's steps did, from its metrics.jsonl lines: the shares of mixed and all-wrong
    groups and of groups with an all-wrong gradient (LENS), pairs per group, lambda first and
    last (AMIR runs; None otherwise), the mean completion length of the first and last 5 steps,
    and the minutes of its steps."""

    def mean(key: str, part: slice = slice(None)) -> float:
        return float(np.mean([line[key] for line in lines[part]]))

    lambdas = [line["lambda"] for line in lines if "lambda" in line]
    return {
        "group_mixed": mean("group_mixed"),
        "group_all_wrong": mean("group_all_wrong"),
        "group_all_wrong_active": mean("group_all_wrong_active"),
        "pairs_per_group": mean("pairs_per_group"),
        "lambda_first_last": [lambdas[0], lambdas[-1]] if lambdas else None,
        "length_first_last": [
            mean("completion_length_mean", slice(0, 5)),
            mean("completion_length_mean", slice(-5, None)),
        ],
        "truncated_first_last": [
            mean("truncated_fraction", slice(0, 5)),
            mean("truncated_fraction", slice(-5, None)),
        ],
        "training_minutes": sum(line["seconds_step"] for line in lines) / 60,
    }


def run_config(folder: Path) -> dict[str, Any]:
    """The config a run trained with (its config.yaml), as a dict; the preset's where the
    folder has none (run folders written by hand)."""
    from groupwise.train.config_file import config_to_dict, load_config

    saved = folder / "config.yaml"
    return config_to_dict(load_config(saved if saved.is_file() else CONFIG))


def settings(config: dict[str, Any]) -> str:
    """The settings a results page names, from a run's config dict."""
    lora = "LoRA 16/16" if config["model"]["lora"] else "full fine-tuning"
    rollout, data = config["rollout"], config["data"]
    return (
        f"{lora}, lr {config['optim']['lr']:g} ({config['optim']['schedule']}), "
        f"{config['train']['max_steps']} steps of {rollout['questions_per_step']} questions x "
        f"{rollout['group_size']} completions of at most {rollout['max_new_tokens']} tokens at "
        f"temperature {rollout['temperature']}, prompt `{data['prompt']}`, "
        f"{data['options'].get('size', 'all')} training questions, aggregation "
        f"`{config['algorithm']['aggregation']}`, 1/0 correctness"
    )


def report(args: argparse.Namespace) -> dict[str, Any]:
    """The table, the figure and the JSON of the runs complete so far: each method over its
    complete seeds, its difference to GRPO over the seeds both have (none without a GRPO run).
    """
    complete = runs.completed(
        METHODS, args.seeds, lambda method, seed: run_dir(args.output, method, seed)
    )
    if not complete[REFERENCE]:
        print(f"no {REFERENCE} run is complete yet: nothing to compare with")
        return {}
    first_grpo = run_dir(args.output, REFERENCE, min(complete[REFERENCE]))
    results: dict[str, Any] = {"seeds": args.seeds, "config": run_config(first_grpo), "methods": {}}
    for method, by_seed in complete.items():
        if by_seed:
            results["methods"][method] = method_results(method, by_seed, complete[REFERENCE])
    target = args.results or args.output
    runs.write_results(target, "smollm2_methods", results, markdown(args, results), figure)
    return results


def method_results(
    method: str, by_seed: dict[int, dict[str, Any]], reference: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    """One method's entry of the results, from its complete runs by seed and GRPO's."""
    mine = list(by_seed.values())
    after = np.array([run["per_problem"] for run in mine])
    before = np.array([run["per_problem_before"] for run in mine])
    entry = {
        "seeds": list(by_seed),
        "overrides": METHODS[method][1],
        "before": [run["before"] for run in mine],
        "final_accuracy": [run["final_accuracy"] for run in mine],
        "gain": [
            difference_to_reference(a[None], b[None]) for a, b in zip(after, before, strict=True)
        ],
        "mechanisms": [mechanisms(run["metrics"]) for run in mine],
        "training_accuracy": [[line["accuracy"] for line in run["metrics"]] for run in mine],
    }
    paired = [seed for seed in by_seed if seed in reference]
    if method != REFERENCE and paired:
        entry["paired_seeds"] = paired
        mine_paired = np.array([by_seed[seed]["per_problem"] for seed in paired])
        reference_paired = np.array([reference[seed]["per_problem"] for seed in paired])
        entry["difference"] = difference_to_reference(mine_paired, reference_paired)
        if len(paired) >= 2:
            per_seed = (mine_paired - reference_paired).mean(axis=1)
            entry["seeds_needed"] = seeds_needed(per_seed)
    return entry


def _interval(low: float, high: float) -> str:
    """A 95 % interval in points, or a dash where there is none (one seed)."""
    return "–" if np.isnan(low) else f"[{signed_points(low)}, {signed_points(high)}]"


def _seeds_needed(entry: dict[str, Any]) -> str:
    """The seeds a difference of the measured mean and sd would need, or why none is given."""
    if "seeds_needed" not in entry:
        return "–"
    needed = entry["seeds_needed"]
    if needed is not None:
        return str(needed)
    return "none: Δ is 0" if entry["difference"]["mean"] == 0 else "over 1000"


def _gain(d: dict[str, float]) -> str:
    """A gain in points with its interval over problems; bold where it excludes zero."""
    text = f"{signed_points(d['mean'])} {_interval(d['problem_low'], d['problem_high'])}"
    return f"**{text}**" if d["distinguishable"] else text


def markdown(args: argparse.Namespace, results: dict[str, Any]) -> str:
    """The results page: settings, the table of accuracies, the mechanisms, the command."""
    seeds = results["seeds"]
    config = results["config"]
    task = config["data"]["heldout"]["options"]
    operations = f"{task['ops']} operation{'s' if task['ops'] > 1 else ''}"
    lines = [
        f"# The methods on SmolLM2-135M-Instruct: arithmetic of {operations}, "
        f"{config['train']['max_steps']} steps",
        "",
        f"- written {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC by "
        "`testbed/smollm2.py`; machine: 2 cores, runs one at a time, trained in "
        f"`{Path(training_python()).parent.parent.name}`",
        f"- command: `python -m testbed.smollm2 --seeds {' '.join(map(str, seeds))}`; runs "
        "complete: "
        + "; ".join(
            f"{method} seeds {results['methods'][method]['seeds']}"
            if method in results["methods"]
            else f"{method} none yet"
            for method in METHODS
        ),
        f"- every run: configs/smollm2_arith.yaml as GRPO's first run read it ({settings(config)}) "
        "with the method's overrides and `train.seed`",
        f"- held-out: {task['size']} `arith` test problems ({operations}, {task['form']} form), "
        f"{config['train']['eval_samples']} samples each at temperature "
        f"{config['rollout']['temperature']}, before the first step and after the last; "
        "accuracy = fraction of samples correct (pass@1)",
        "",
        "| method | seeds | before (%) | after (%) | gain per seed (points) "
        "| Δ to GRPO per seed | Δ to GRPO, mean | 95 % over seeds | 95 % over problems "
        "| seeds for the interval over seeds to exclude 0 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    grpo = results["methods"][REFERENCE]
    grpo_after = dict(zip(grpo["seeds"], grpo["final_accuracy"], strict=True))
    for method, entry in results["methods"].items():
        before = ", ".join(f"{100 * b:.1f}" for b in entry["before"])
        after = ", ".join(f"{100 * a:.1f}" for a in entry["final_accuracy"])
        gains = "; ".join(_gain(g) for g in entry["gain"])
        seeds_run = ", ".join(map(str, entry["seeds"]))
        row = f"| {method} | {seeds_run} | {before} | {after} | {gains} |"
        if "difference" in entry:
            d = entry["difference"]
            per_seed = ", ".join(
                signed_points(a - grpo_after[seed])
                for seed, a in zip(entry["seeds"], entry["final_accuracy"], strict=True)
                if seed in grpo_after
            )
            mean = signed_points(d["mean"])
            row += (
                f" {per_seed} | {f'**{mean}**' if d['distinguishable'] else mean} | "
                f"{_interval(d['seed_low'], d['seed_high'])} | "
                f"{_interval(d['problem_low'], d['problem_high'])} | "
                f"{_seeds_needed(entry)} |"
            )
        else:
            row += " – | – | – | – | – |"
        lines.append(row)
    lines += [
        "",
        "Per seed, in seed order. Gain: after - before, paired over problems, with its 95 % "
        "bootstrap interval over problems. Δ to GRPO: the method's final accuracy minus GRPO's "
        "at the same seed; its mean over the seeds both have run, with the 95 % t-interval over "
        "those seeds (two or more; with two, t has one degree of freedom and the interval is "
        "wide) and the 95 % bootstrap interval over problems of the per-problem differences "
        "averaged over seeds. **Bold**: every interval of that number excludes zero. Seeds "
        "for the interval over seeds to exclude 0: the fewest seeds at which a t interval of "
        "the mean and sd measured would (testbed/stats.py, seeds_needed; a planning number).",
        "",
        "| method | mixed groups | all-wrong groups | with an all-wrong gradient | pairs per "
        "group | lambda first -> last | completion tokens, first 5 -> last 5 steps, per seed "
        "| cut at the token limit, first 5 -> last 5, per seed | training min/run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method, entry in results["methods"].items():
        m = entry["mechanisms"]
        mean = {key: float(np.mean([run[key] for run in m])) for key in MEAN_KEYS}
        lambdas = [run["lambda_first_last"] for run in m if run["lambda_first_last"]]
        lam = " -> ".join(f"{v:.4f}" for v in np.mean(lambdas, axis=0)) if lambdas else "–"
        length = "; ".join("{:.0f} -> {:.0f}".format(*run["length_first_last"]) for run in m)
        cut = "; ".join(
            "{:.0f} -> {:.0f} %".format(*(100 * v for v in run["truncated_first_last"]))
            for run in m
        )
        lines.append(
            f"| {method} | {100 * mean['group_mixed']:.0f} % | "
            f"{100 * mean['group_all_wrong']:.0f} % | "
            f"{100 * mean['group_all_wrong_active']:.0f} % | {mean['pairs_per_group']:.2f} | "
            f"{lam} | {length} | {cut} | {mean['training_minutes']:.1f} |"
        )
    lines += [
        "",
        "Means over the steps of every seed's run. With an all-wrong gradient: groups that are "
        "all wrong and still get a non-zero advantage (LENS), as a share of all groups.",
        "",
    ]
    return "\n".join(lines)


def figure(results: dict[str, Any], path: Path) -> None:
    """Left: each method's held-out accuracy before and after, one line per seed. Right: its
    training accuracy per step, a moving mean of 5 steps, mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    for index, (method, entry) in enumerate(results["methods"].items()):
        color = f"C{index}"
        for seed_index, (b, a) in enumerate(
            zip(entry["before"], entry["final_accuracy"], strict=True)
        ):
            label = method if seed_index == 0 else None
            left.plot([0, 1], [100 * b, 100 * a], "o-", color=color, alpha=0.8, label=label)
        curve = np.mean(entry["training_accuracy"], axis=0)
        smooth = np.convolve(curve, np.ones(5) / 5, mode="valid")
        right.plot(np.arange(5, len(curve) + 1), 100 * smooth, color=color, label=method)
    config = results["config"]
    left.set_xticks([0, 1], ["before", f"after {config['train']['max_steps']} steps"])
    left.set_ylabel("held-out accuracy (%)")
    left.set_title(
        f"{config['data']['heldout']['options']['size']} held-out problems x "
        f"{config['train']['eval_samples']} samples, one line per seed"
    )
    right.set_xlabel("step")
    right.set_ylabel("training accuracy (%), mean of 5 steps")
    right.set_title("training groups")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=list(METHODS),
        default=list(METHODS),
        help="the methods to train, in this order within a seed (the report shows every "
        "complete run)",
    )
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "overrides", nargs="*", help="section.key=value overrides of every run (a smoke run)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.results is None and args.output == DEFAULT_OUTPUT:
        args.results = RESULTS
    if not args.report_only:
        runs.run_all(planned_runs(args), args.output, REPO)
    report(args)


if __name__ == "__main__":
    main()
