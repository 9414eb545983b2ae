"""The learning testbed: RL from the tiny `arith` base policy with GRPO, AMIR-GRPO, LENS,
AMIR-GRPO + LENS and GSPO at equal budgets, then held-out pass@k per method across seeds.

Every run starts from the same SFT base policy (`groupwise.sft`, alias `arith-base`) and uses
configs/testbed_arith.yaml (binary 1/0 correctness reward, plain prompt, full fine-tuning, the
same questions per step, group size, steps, learning rate and schedule); only the method options
differ (`METHODS`). A run is (level, method, seed); after training, its policy is evaluated on
held-out `arith` test problems of its level (n samples per problem at temperature 1.0, unbiased
pass@k, REFERENCE.md 4). The base policy's own evaluation is the baseline row.

Budget ("questions x completions x steps"): every method samples questions_per_step x
group_size completions per step for max_steps steps. GSPO makes num_iterations=2 optimizer
updates per rollout batch (its sequence ratio is 1 on the first, so without a second update its
tight clip never acts and GSPO on-policy would be GRPO with a sequence-level loss): same samples,
twice the updates.

Outputs, under --output (default runs/learning): LEVEL/METHOD/seedS/ (the trainer's run folder:
metrics.jsonl, checkpoints, final/model; eval/ with samples and results; summary.json when the
run is complete), LEVEL/base/ for the baseline, and the results learning.md, learning.json,
learning.png; the full preset also writes them to bench/results/. A rerun skips complete runs and
resumes a killed one from its last checkpoint; runs write only their own folders, so --jobs N
runs N of them in parallel (one torch thread each by default: on a small CPU, one thread per
process beats two processes fighting over two threads each).

    python bench/learning.py                    # full preset (about 20-25 min on 2 quiet cores)
    python bench/learning.py --jobs 2           # the same, two runs at a time
    python bench/learning.py --preset smoke     # a minute: checks the pipeline end to end
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from groupwise.models import register_model_alias
from groupwise.sft import SFTSettings, load_base_policy

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "testbed_arith.yaml"
RESULTS_DIR = REPO / "bench" / "results"

# Method -> overrides of configs/testbed_arith.yaml (which is GRPO). Nothing else differs.
METHODS: dict[str, tuple[str, ...]] = {
    "GRPO": (),
    "AMIR-GRPO": ("algorithm.amir=true",),
    "LENS": ("algorithm.advantage=lens",),
    "AMIR-GRPO+LENS": ("algorithm.advantage=lens", "algorithm.amir=true"),
    "GSPO": (
        "algorithm.loss_level=sequence",
        "algorithm.eps_low=3e-4",
        "algorithm.eps_high=4e-4",
        "algorithm.num_iterations=2",
    ),
}
BASE = "base"
CURVE_KEYS = ("reward_mean", "accuracy", "group_all_wrong", "lambda")
CURVE_TITLES = {
    "reward_mean": "reward (binary)",
    "accuracy": "training accuracy",
    "group_all_wrong": "fraction of all-wrong groups",
    "lambda": "lambda_reg (AMIR methods)",
}
SMOOTH = 5  # steps of the moving average in the figure


def _quick_base(*, dtype: torch.dtype | None, seed: int) -> tuple[Any, Any]:
    return load_base_policy(settings=SFTSettings.quick())


# The test-size base policy (groupwise.sft's quick preset) for the smoke preset; registered at
# import so that worker processes, which import this module, know it too.
register_model_alias("arith-base-quick", _quick_base)


@dataclass(frozen=True)
class BenchSettings:
    """What defines the runs of one bench (saved as OUTPUT/settings.json).

    levels: {level: methods run at that level}. seeds: training seeds (each run's train.seed;
    the base policy is the same for all). steps, questions_per_step, group_size, lr: the equal
    budget of every method. eval_problems, eval_n, eval_ks: held-out test problems per level,
    samples per problem, and the k of pass@k. max_new_tokens: for training and evaluation.
    model: the base policy alias.
    """

    levels: dict[str, tuple[str, ...]]
    seeds: tuple[int, ...]
    steps: int
    questions_per_step: int
    group_size: int
    lr: float
    eval_problems: int
    eval_n: int
    eval_ks: tuple[int, ...]
    max_new_tokens: int
    model: str

    # Settings a run's results depend on; an output folder must keep them (levels and seeds
    # only add or drop runs).
    RUN_KEYS = (
        "steps",
        "questions_per_step",
        "group_size",
        "lr",
        "eval_problems",
        "eval_n",
        "eval_ks",
        "max_new_tokens",
        "model",
    )

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["levels"] = {k: list(v) for k, v in self.levels.items()}
        data["seeds"] = list(self.seeds)
        data["eval_ks"] = list(self.eval_ks)
        return data


PRESETS: dict[str, BenchSettings] = {
    "full": BenchSettings(
        levels={
            "mid": tuple(METHODS),
            # Most groups start all-wrong here: the regime LENS is for.
            "hard": ("GRPO", "AMIR-GRPO", "LENS"),
        },
        seeds=(0, 1, 2),
        steps=30,
        questions_per_step=16,
        group_size=8,
        lr=1e-4,
        eval_problems=150,
        eval_n=8,
        eval_ks=(1, 4, 8),
        max_new_tokens=96,
        model="arith-base",
    ),
    "smoke": BenchSettings(
        levels={"easy": ("GRPO", "LENS")},
        seeds=(0,),
        steps=3,
        questions_per_step=4,
        group_size=4,
        lr=1e-4,
        eval_problems=16,
        eval_n=4,
        eval_ks=(1, 4),
        max_new_tokens=64,
        model="arith-base-quick",
    ),
}


@dataclass(frozen=True)
class RunSpec:
    """One run: `method` at `level` with training seed `seed` (method "base": the untrained
    base policy, evaluated only; its seed is unused)."""

    level: str
    method: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.level}/{self.method}" + ("" if self.method == BASE else f"/seed{self.seed}")

    def folder(self, root: Path) -> Path:
        return root / self.level / self.method / ("" if self.method == BASE else f"seed{self.seed}")


def run_specs(settings: BenchSettings) -> list[RunSpec]:
    """The baseline of every level, then every (level, method, seed) run, seeds innermost."""
    specs = [RunSpec(level, BASE, 0) for level in settings.levels]
    for level, methods in settings.levels.items():
        for method in methods:
            if method not in METHODS:
                raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHODS)}")
            specs += [RunSpec(level, method, seed) for seed in settings.seeds]
    return specs


def train_overrides(spec: RunSpec, settings: BenchSettings, run_dir: Path) -> list[str]:
    """Overrides of configs/testbed_arith.yaml for one training run."""
    return [
        f"model.name={settings.model}",
        f"data.options.level={spec.level}",
        f"rollout.group_size={settings.group_size}",
        f"rollout.questions_per_step={settings.questions_per_step}",
        f"rollout.max_new_tokens={settings.max_new_tokens}",
        f"rollout.batch_size={settings.group_size * settings.questions_per_step}",
        f"train.micro_batch_size={settings.group_size * settings.questions_per_step}",
        f"optim.lr={settings.lr}",
        f"train.max_steps={settings.steps}",
        f"train.save_every={max(1, settings.steps // 2)}",
        f"train.seed={spec.seed}",
        f"train.output_dir={run_dir}",
        *METHODS[spec.method],
    ]


# ---------------------------------------------------------------------------------------------
# One run: train (or resume), evaluate, summarise


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    model_name: str,
    level: str,
    settings: BenchSettings,
    output_dir: Path,
) -> dict[str, Any]:
    """pass@k of `model` on the first settings.eval_problems `arith` test problems of `level`
    (groupwise.evaluation.evaluate: resumable samples in output_dir); the results entry of the
    level (pass@k, pass@k_ci, counts)."""
    from groupwise.data import load_benchmark, render_prompt
    from groupwise.evaluation import EvalConfig, evaluate
    from groupwise.rollout import TransformersGenerator
    from groupwise.scoring import rollout_mean_logp

    bench = f"arith:{level}"
    config = EvalConfig(
        model=model_name,
        benchmarks=(bench,),
        n=settings.eval_n,
        ks=settings.eval_ks,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=settings.max_new_tokens,
        prompt="plain",
        batch_size=256,
        seed=0,
    )
    problems = load_benchmark("arith", split="test", level=level, size=settings.eval_problems)
    generator = TransformersGenerator(model, tokenizer, batch_size=config.batch_size)

    results = evaluate(
        config,
        {bench: problems},
        generator,
        output_dir,
        prompt_fn=lambda p: render_prompt(p, "plain", tokenizer),
        # Saved per sample so `groupwise analyze margin/perplexity` can read these runs.
        logp_fn=partial(rollout_mean_logp, model, batch_size=64),
        progress=False,
    )
    return results[bench]


def read_curves(metrics_path: Path) -> dict[str, list[float]]:
    """{key: [value per step]} for CURVE_KEYS from a run's metrics.jsonl."""
    from groupwise.records import iter_jsonl

    records = [row for _, row in iter_jsonl(metrics_path)]
    return {key: [float(r.get(key, math.nan)) for r in records] for key in ("step", *CURVE_KEYS)}


def run_one(spec: RunSpec, settings: BenchSettings, root: Path, progress: bool = False) -> dict:
    """Train (resuming a killed run) and evaluate one run; returns and saves its summary.

    A run whose summary.json exists is not touched again.
    """
    folder = spec.folder(root)
    summary_path = folder / "summary.json"
    if summary_path.is_file():
        return json.loads(summary_path.read_text())
    from groupwise.models import load_model
    from groupwise.train.config import load_config
    from groupwise.train.trainer import Trainer

    started = time.perf_counter()
    curves: dict[str, list[float]] = {}
    if spec.method == BASE:
        model_name = settings.model
        model, tokenizer = load_model(model_name)
    else:
        final = folder / "final" / "model"
        if (final / "config.json").is_file():
            model, tokenizer = load_model(str(final))
        else:
            config = load_config(CONFIG, train_overrides(spec, settings, folder))
            config.train.progress = progress
            trainer = Trainer(config, resume=True)
            trainer.train()
            model, tokenizer = trainer.model, trainer.tokenizer
        model_name = str(final.resolve())
        curves = read_curves(folder / "metrics.jsonl")
    trained = time.perf_counter()
    model.eval()
    results = evaluate_policy(model, tokenizer, model_name, spec.level, settings, folder / "eval")
    summary = {
        "level": spec.level,
        "method": spec.method,
        "seed": spec.seed,
        "results": results,
        "curves": curves,
        "seconds_train": trained - started,
        "seconds_eval": time.perf_counter() - trained,
    }
    tmp = summary_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary))
    tmp.replace(summary_path)
    return summary


def _worker_init(threads: int) -> None:
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------------------
# Aggregation, table, figure


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def aggregate(summaries: Sequence[Mapping[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """{level: {method: row}} from run summaries. A row: "seeds", per k "pass@k" (values per
    seed, in percent), "pass@k_mean", "pass@k_sd"; for trained methods also "train_accuracy"
    and "all_wrong" as [mean of the first 5 steps, mean of the last 5 steps] averaged over seeds,
    and "minutes" (mean wall minutes per run); for the base "pass@k_ci" (95 % bootstrap over
    problems, percent)."""
    table: dict[str, dict[str, Any]] = {}
    for s in sorted(summaries, key=lambda s: (s["level"], s["method"], s["seed"])):
        row = table.setdefault(s["level"], {}).setdefault(
            s["method"], {"seeds": [], "minutes": [], "train_accuracy": [], "all_wrong": []}
        )
        row["seeds"].append(s["seed"])
        row["minutes"].append((s["seconds_train"] + s["seconds_eval"]) / 60)
        for k in ks:
            row.setdefault(f"pass@{k}", []).append(100 * s["results"][f"pass@{k}"])
            if s["method"] == BASE:
                row[f"pass@{k}_ci"] = [100 * x for x in s["results"][f"pass@{k}_ci"]]
        if s["curves"]:
            acc, wrong = s["curves"]["accuracy"], s["curves"]["group_all_wrong"]
            row["train_accuracy"].append([statistics.fmean(acc[:5]), statistics.fmean(acc[-5:])])
            row["all_wrong"].append([statistics.fmean(wrong[:5]), statistics.fmean(wrong[-5:])])
    for methods in table.values():
        for row in methods.values():
            for k in ks:
                row[f"pass@{k}_mean"], row[f"pass@{k}_sd"] = mean_sd(row[f"pass@{k}"])
            for key in ("train_accuracy", "all_wrong"):
                pairs = row[key]
                row[key] = [statistics.fmean(p[i] for p in pairs) for i in (0, 1)] if pairs else []
            row["minutes"] = statistics.fmean(row["minutes"])
    return table


def _method_order(methods: Mapping[str, Any]) -> list[str]:
    return [m for m in (BASE, *METHODS) if m in methods]


def markdown_tables(table: Mapping[str, Mapping[str, Any]], ks: Sequence[int]) -> str:
    """One Markdown table per level: pass@k mean ± sd over seeds [min, max], the difference of
    pass@1 to GRPO with its standard error, training accuracy and all-wrong groups at the start
    and end of training, wall minutes per run."""
    out = []
    for level, methods in table.items():
        header = [
            "method",
            "seeds",
            *(f"pass@{k} (%)" for k in ks),
            "Δ pass@1 vs GRPO (pts ± se)",
            "train acc first→last 5 steps",
            "all-wrong groups first→last",
            "min/run",
        ]
        lines = [
            f"### level `{level}`",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        grpo = methods.get("GRPO")
        for method in _method_order(methods):
            row = methods[method]
            if method == BASE:
                cells = [
                    f"{row[f'pass@{k}_mean']:.1f} [{row[f'pass@{k}_ci'][0]:.1f}, "
                    f"{row[f'pass@{k}_ci'][1]:.1f}]"
                    for k in ks
                ]
                lines.append(
                    "| base policy (95 % CI over problems) | – | "
                    + " | ".join(cells)
                    + " | – | – | – | "
                    + f"{row['minutes']:.1f} |"
                )
                continue
            # One seed has no spread: show the value alone rather than a "± 0.0" it never had.
            cells = [
                f"{row[f'pass@{k}_mean']:.1f} ± {row[f'pass@{k}_sd']:.1f} "
                f"[{min(row[f'pass@{k}']):.1f}, {max(row[f'pass@{k}']):.1f}]"
                if len(row["seeds"]) > 1
                else f"{row[f'pass@{k}_mean']:.1f}"
                for k in ks
            ]
            delta = "–"
            if grpo is not None and method != "GRPO":
                diff = row["pass@1_mean"] - grpo["pass@1_mean"]
                se = math.sqrt(
                    row["pass@1_sd"] ** 2 / len(row["seeds"])
                    + grpo["pass@1_sd"] ** 2 / len(grpo["seeds"])
                )
                single = len(row["seeds"]) == 1 or len(grpo["seeds"]) == 1
                delta = f"{diff:+.1f}" if single else f"{diff:+.1f} ± {se:.1f}"
            acc, wrong = row["train_accuracy"], row["all_wrong"]
            lines.append(
                f"| {method} | {len(row['seeds'])} | "
                + " | ".join(cells)
                + f" | {delta} | {100 * acc[0]:.0f}→{100 * acc[1]:.0f} % | "
                + f"{100 * wrong[0]:.0f}→{100 * wrong[1]:.0f} % | {row['minutes']:.1f} |"
            )
        out.append("\n".join(lines))
    return "\n\n".join(out)


def reading(table: Mapping[str, Mapping[str, Any]]) -> str:
    """Plain sentences computed from the table: gain over the base per method, and whether the
    differences between methods exceed the spread across seeds (the note says what cannot be
    concluded from a few seeds)."""
    lines = []
    for level, methods in table.items():
        trained = [m for m in _method_order(methods) if m != BASE]
        if BASE not in methods or not trained:
            continue
        base = methods[BASE]["pass@1_mean"]
        gains = {m: methods[m]["pass@1_mean"] - base for m in trained}
        lines.append(
            f"- `{level}`: pass@1 of the base policy {base:.1f} %; after RL "
            + ", ".join(f"{m} {g:+.1f}" for m, g in gains.items())
            + " points (mean over seeds)."
        )
        means = [methods[m]["pass@1_mean"] for m in trained]
        sds = [methods[m]["pass@1_sd"] for m in trained if len(methods[m]["seeds"]) > 1]
        if sds:
            gap = max(means) - min(means)
            spread = max(sds)
            verdict = "larger than" if gap > 2 * spread else "within about twice"
            lines.append(
                f"  Between methods the pass@1 means differ by at most {gap:.1f} points; the "
                f"largest seed standard deviation is {spread:.1f} points, so the gap is "
                f"{verdict} the seed spread."
            )
    return "\n".join(lines)


def _moving_average(values: Sequence[float], window: int) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if len(values) < window:
        return values
    kernel = np.ones(window) / window
    head = np.cumsum(values[: window - 1]) / np.arange(1, window)
    return np.concatenate([head, np.convolve(values, kernel, mode="valid")])


def plot_curves(summaries: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """One PNG: a row per level, a column per CURVE_KEYS metric; per method the mean over seeds
    of the SMOOTH-step moving average, shaded between the lowest and highest seed."""
    from groupwise.analysis.figures import new_figure, save_figure, series_colors

    levels = list(dict.fromkeys(s["level"] for s in summaries if s["curves"]))
    keys = [k for k in CURVE_KEYS if k != "lambda" or any("AMIR" in s["method"] for s in summaries)]
    colors = dict(zip(METHODS, series_colors(len(METHODS)), strict=True))
    fig, axes = new_figure(
        width=4.0 * len(keys),
        height=3.2 * max(1, len(levels)),
        ncols=len(keys),
        nrows=max(1, len(levels)),
    )
    for i, level in enumerate(levels):
        for method in METHODS:
            runs = [s for s in summaries if s["level"] == level and s["method"] == method]
            if not runs:
                continue
            for j, key in enumerate(keys):
                if key == "lambda" and "AMIR" not in method:
                    continue
                length = min(len(s["curves"][key]) for s in runs)
                smooth = np.stack(
                    [_moving_average(s["curves"][key][:length], SMOOTH) for s in runs]
                )
                steps = np.arange(1, length + 1)
                ax = axes[i, j]
                ax.plot(
                    steps,
                    smooth.mean(0),
                    color=colors[method],
                    label=f"{method} ({len(runs)} seeds)",
                )
                if len(runs) > 1:
                    ax.fill_between(
                        steps,
                        smooth.min(0),
                        smooth.max(0),
                        color=colors[method],
                        alpha=0.15,
                        linewidth=0,
                    )
        for j, key in enumerate(keys):
            ax = axes[i, j]
            ax.set_title(f"{level}: {CURVE_TITLES[key]}", fontsize=10)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        axes[i, 0].legend(fontsize=7)
    return save_figure(fig, path)


# ---------------------------------------------------------------------------------------------
# The bench


def machine() -> str:
    import transformers

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; python "
        f"{platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}"
    )


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def check_output(settings: BenchSettings, root: Path) -> None:
    """Refuse an output folder whose runs were made with other run-defining settings."""
    path = root / "settings.json"
    mine = settings.to_dict()
    if path.is_file():
        saved = json.loads(path.read_text())
        diffs = [
            f"{k}: saved {saved.get(k)!r}, now {mine[k]!r}"
            for k in BenchSettings.RUN_KEYS
            if saved.get(k) != mine[k]
        ]
        if diffs:
            raise SystemExit(
                f"{root} holds runs made with other settings ({'; '.join(diffs)}); use another "
                "--output folder or the same settings"
            )
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(mine, indent=2) + "\n")


def run_bench(settings: BenchSettings, root: Path, jobs: int, threads: int) -> list[dict]:
    """Every run of `settings` not yet complete under `root`, `jobs` at a time, with a bar
    over runs showing the last one's pass@1; returns all summaries."""
    specs = run_specs(settings)
    done = [s for s in specs if (s.folder(root) / "summary.json").is_file()]
    todo = [s for s in specs if s not in done]
    summaries = [run_one(s, settings, root) for s in done]
    bar = tqdm(total=len(specs), initial=len(done), desc="runs", unit="run", dynamic_ncols=True)

    def finished(summary: dict) -> None:
        summaries.append(summary)
        bar.update(1)
        name = RunSpec(summary["level"], summary["method"], summary["seed"]).name
        bar.set_postfix_str(
            f"{name} pass@1 {100 * summary['results']['pass@1']:.1f}% "
            f"({(summary['seconds_train'] + summary['seconds_eval']) / 60:.1f} min)"
        )

    if jobs == 1:
        for spec in todo:
            bar.set_description(f"runs ({spec.name})")
            finished(run_one(spec, settings, root, progress=True))
    else:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            jobs, mp_context=context, initializer=_worker_init, initargs=(threads,)
        ) as pool:
            futures = [pool.submit(run_one, spec, settings, root) for spec in todo]
            for future in as_completed(futures):
                finished(future.result())
    bar.close()
    return summaries


def write_results(
    settings: BenchSettings,
    summaries: Sequence[Mapping[str, Any]],
    folders: Sequence[Path],
    *,
    wall_seconds: float,
    load_before: str,
    name: str = "learning",
) -> None:
    """learning.md, learning.json and learning.png into each of `folders`."""
    table = aggregate(summaries, settings.eval_ks)
    command = " ".join(shlex.quote(a) for a in ["python", *sys.argv])
    methods_text = "\n".join(
        f"- {m}: " + (", ".join(f"`{o}`" for o in o_list) if o_list else "the config as it is")
        for m, o_list in METHODS.items()
    )
    budget = (
        f"{settings.questions_per_step} questions x {settings.group_size} completions x "
        f"{settings.steps} steps = "
        f"{settings.questions_per_step * settings.group_size * settings.steps} completions "
        "per run"
    )
    text = f"""# Learning testbed: GRPO, AMIR-GRPO, LENS, AMIR-GRPO + LENS, GSPO on `arith`

- command: `{command}`
- machine: {machine()}
- wall time: {wall_seconds / 60:.1f} min for the runs this invocation made (runs already
  complete were read back); load average (1/5/15 min) before: {load_before}; after:
  {load_average()}
- base policy: `{settings.model}` (groupwise.sft); every run fine-tunes all its weights from it
- budget, the same for every method: {budget}; lr {settings.lr}, cosine schedule with 10 %
  warm-up, binary 1/0 correctness reward, temperature 1.0, configs/testbed_arith.yaml
- held-out evaluation: the first {settings.eval_problems} `arith` test problems of the level
  (no question shared with train), n = {settings.eval_n} samples per problem at temperature
  1.0, unbiased pass@k (REFERENCE.md 4); seeds {list(settings.seeds)} are training seeds
  (sampling and question order), the evaluation seed is fixed

Methods (overrides of configs/testbed_arith.yaml):
{methods_text}

AMIR-GRPO uses margin 0.5 (binary rewards: every correct/wrong pair), beta_dpo 0.5, the
official loss-ratio rule for lambda. GSPO makes 2 updates per rollout batch (same samples,
twice the optimizer steps); with 1 update its sequence ratio would stay 1 and its clip idle.

## pass@k on held-out problems

pass@k: mean ± standard deviation over seeds [lowest, highest seed]. Δ pass@1 vs GRPO: the
difference of the seed means and its standard error sqrt(sd1²/n1 + sd2²/n2). The base row's
interval is a 95 % bootstrap over problems: it is the evaluation noise of one policy.

{markdown_tables(table, settings.eval_ks)}

## Learning curves

![learning curves]({name}.png)

Per method the mean over seeds of a {SMOOTH}-step moving average, shaded between the lowest and
highest seed.

## What the numbers say (computed)

{reading(table)}
"""
    payload = {
        "settings": settings.to_dict(),
        "command": command,
        "wall_seconds": wall_seconds,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "table": table,
        "runs": list(summaries),
    }
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.md").write_text(text)
        (folder / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
        plot_curves(summaries, folder / f"{name}.png")
    print(text)
    print("written: " + ", ".join(str(f / f"{name}.md") for f in folders))


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def select(
    settings: BenchSettings, levels: Sequence[str] | None, methods: Sequence[str] | None
) -> BenchSettings:
    """`settings` restricted to some of its levels and methods (None: all of them)."""
    unknown = [level for level in levels or () if level not in settings.levels]
    unknown += [m for m in methods or () if m not in METHODS]
    if unknown:
        raise ValueError(
            f"unknown level(s) or method(s) {unknown}; levels of this preset: "
            f"{', '.join(settings.levels)}; methods: {', '.join(METHODS)}"
        )
    chosen = {
        level: tuple(m for m in ms if methods is None or m in methods)
        for level, ms in settings.levels.items()
        if levels is None or level in levels
    }
    return dataclasses.replace(settings, levels={k: v for k, v in chosen.items() if v})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1)")
    parser.add_argument(
        "--levels",
        type=_names,
        default=None,
        help="comma-separated levels of the preset to run (default: all)",
    )
    parser.add_argument(
        "--methods",
        type=_names,
        default=None,
        help=f"comma-separated methods to run (default: all): {', '.join(METHODS)}",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="runs folder (default runs/learning, runs/learning-PRESET)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.threads < 1:
        parser.error("--jobs and --threads must be >= 1")
    settings = PRESETS[args.preset]
    if args.seeds is not None:
        settings = dataclasses.replace(settings, seeds=tuple(range(args.seeds)))
    try:
        settings = select(settings, args.levels, args.methods)
    except ValueError as err:
        parser.error(str(err))
    root = args.output or REPO / "runs" / (
        "learning" if args.preset == "full" else f"learning-{args.preset}"
    )
    check_output(settings, root)
    load_before = load_average()
    started = time.perf_counter()
    _worker_init(args.threads)
    # Train (or read) the base policy once, before parallel workers would each train it.
    from groupwise.models import load_model

    load_model(settings.model)
    summaries = run_bench(settings, root, args.jobs, args.threads)
    # Only a complete run of the full preset replaces the committed results.
    complete = args.preset == "full" and all(
        option is None for option in (args.levels, args.methods, args.seeds)
    )
    folders = [root] + ([RESULTS_DIR] if complete else [])
    write_results(
        settings,
        summaries,
        folders,
        wall_seconds=time.perf_counter() - started,
        load_before=load_before,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
