"""The learning testbed: RL from the tiny `arith` base policy with GRPO, AMIR-GRPO (two lambda
rules), LENS (full and its two ablations), AMIR-GRPO + LENS and GSPO at equal sample budgets,
then held-out pass@k per method across paired seeds, and the methods' mechanisms per step.

Every run starts from the same SFT base policy (`groupwise.sft`, alias `arith-base`) and uses
configs/testbed_arith.yaml (binary 1/0 correctness reward, plain prompt, full fine-tuning, the
same questions per step, group size, steps, learning rate and schedule); only the method options
differ (`METHODS`). A run is (level, method, seed). During training its policy is evaluated on
held-out problems at `curve_points` evenly spaced checkpoints (pass@k and the preference margin
of `groupwise analyze margin`, from samples saved with their mean log-probs); after training,
on the level's held-out `arith` test problems with n samples per problem at temperature 1.0
(unbiased pass@k, REFERENCE.md 4). The base policy's own evaluation is the baseline and step 0.
Every method uses the same training seeds and the same evaluation problems and sampling seeds,
so its difference to GRPO is paired over seeds and over problems (bench/learning_stats.py).

Budgets: every method samples questions_per_step x group_size completions per step for `steps`
steps. The GSPO entry and its control split each rollout batch into 2 PPO mini-batches (one
optimizer step each, the second off-policy): the same questions and completions, twice the
optimizer steps (its sequence ratio is 1 on an on-policy update, so without a later update its
tight clip never acts). The results file lists the three counts per method.

Outputs, under --output (default runs/learning, runs/learning-PRESET): LEVEL/METHOD/seedS/ (the
trainer's run folder: metrics.jsonl, checkpoints, final/model; curve/step-N/ and eval/, each an
evaluation folder with samples and results; summary.json when the run is complete), LEVEL/base/
for the baseline, and learning.md, learning.json and the figures learning.png, learning-lens.png,
learning-amir.png; the full preset also writes them to bench/results/. A rerun skips complete
runs, resumes a killed run from its last checkpoint and an evaluation from its last problem;
runs write only their own folders, so --jobs N runs N of them in parallel (one torch thread each
by default: on a small CPU, one thread per process beats two processes sharing two threads).

    python bench/learning.py --jobs 2           # full preset (about 4 hours on 2 cores)
    python bench/learning.py --quick --jobs 2   # a first look (about 15 minutes on 2 cores)
    python bench/learning.py --preset plateau   # GRPO at a constant lr: where pass@1 plateaus
    python bench/learning.py --preset smoke     # minutes: every method, the pipeline end to end
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
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from learning_stats import difference_to_reference, paired_seed_interval
from tqdm.auto import tqdm

from groupwise.models import register_model_alias
from groupwise.sft import SFTSettings, load_base_policy

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "testbed_arith.yaml"
RESULTS_DIR = REPO / "bench" / "results"


@dataclass(frozen=True)
class Method:
    """A method of the testbed: its label in tables and figures, its overrides of
    configs/testbed_arith.yaml (which is GRPO), and one line on what it is."""

    label: str
    overrides: tuple[str, ...]
    note: str


GSPO = ("algorithm.loss_level=sequence", "algorithm.eps_low=3e-4", "algorithm.eps_high=4e-4")
LENS = ("algorithm.advantage=lens",)
AMIR = ("algorithm.amir=true",)
# Method key (folder name, --methods) -> Method. Nothing else differs between runs.
METHODS: dict[str, Method] = {
    "grpo": Method("GRPO", (), "the config as it is"),
    "amir": Method("AMIR-GRPO", AMIR, "lambda by the official loss-ratio rule"),
    "amir_grad": Method(
        "AMIR-GRPO grad-λ",
        (*AMIR, "algorithm.lambda_measure=grad"),
        "lambda by the gradient-norm ratio, measured every step",
    ),
    "lens": Method("LENS", LENS, "full"),
    "lens_mixed": Method(
        "LENS mixed_only", (*LENS, "algorithm.lens_mode=mixed_only"), "all-wrong groups get A = 0"
    ),
    "lens_negative": Method(
        "LENS negative_only",
        (*LENS, "algorithm.lens_mode=negative_only"),
        "mixed groups use plain binary GRPO",
    ),
    "amir_lens": Method("AMIR-GRPO+LENS", (*LENS, *AMIR), "both; lambda by the loss rule"),
    "gspo_m2": Method(
        "GSPO M=2",
        (*GSPO, "algorithm.minibatches=2"),
        "sequence ratio, clip 3e-4/4e-4, 2 PPO mini-batches per rollout batch",
    ),
    "grpo_m2": Method(
        "GRPO M=2",
        ("algorithm.minibatches=2",),
        "GRPO with GSPO's 2 mini-batches: the control for its extra optimizer steps",
    ),
}
REFERENCE = "grpo"
BASE = "base"
# Runs that only control another method's comparison: scheduled after every other run.
CONTROLS = ("grpo_m2",)
LENS_METHODS = ("lens", "lens_mixed", "lens_negative", "amir_lens")
AMIR_METHODS = ("amir", "amir_grad", "amir_lens")
# Per-step metrics kept from each run's metrics.jsonl.
STEP_KEYS = (
    "accuracy",
    "group_all_wrong",
    "group_all_correct",
    "group_all_wrong_active",
    "all_wrong_grad_share",
    "grad_norm",
    "lambda",
    "pairs_per_group",
)
SMOOTH = 9  # steps of the moving average in the figures


def _quick_base(*, dtype: torch.dtype | None, seed: int) -> tuple[Any, Any]:
    return load_base_policy(settings=SFTSettings.quick())


# The test-size base policy (groupwise.sft's quick preset) for the smoke preset; registered at
# import so that worker processes, which import this module, know it too.
register_model_alias("arith-base-quick", _quick_base)


@dataclass(frozen=True)
class BenchSettings:
    """What defines the runs of one bench (saved as OUTPUT/settings.json).

    levels: {level: method keys run at that level}. seeds: training seeds (each run's
    train.seed; the base policy is the same for all). steps ({level: steps}), questions_per_step,
    group_size, lr, schedule: the equal budget of every method at a level. eval_problems,
    eval_n, eval_ks: the final held-out evaluation (the first eval_problems test problems of the
    level, eval_n samples each, pass@k for each k). curve_points, curve_problems, curve_n:
    held-out evaluations during training, at steps S/curve_points, 2 S/curve_points, ..., S (and
    the base at 0), on the first curve_problems problems with curve_n samples. max_new_tokens:
    for training and evaluation. model: the base policy alias.
    """

    levels: dict[str, tuple[str, ...]]
    seeds: tuple[int, ...]
    steps: dict[str, int]
    questions_per_step: int
    group_size: int
    lr: float
    schedule: str
    eval_problems: int
    eval_n: int
    eval_ks: tuple[int, ...]
    curve_points: int
    curve_problems: int
    curve_n: int
    max_new_tokens: int
    model: str

    # Settings a run's results depend on; an output folder must keep them (levels and seeds
    # only add or drop runs).
    RUN_KEYS = (
        "steps",
        "questions_per_step",
        "group_size",
        "lr",
        "schedule",
        "eval_problems",
        "eval_n",
        "eval_ks",
        "curve_points",
        "curve_problems",
        "curve_n",
        "max_new_tokens",
        "model",
    )

    def __post_init__(self) -> None:
        for level in self.levels:
            steps = self.steps.get(level)
            if not isinstance(steps, int) or steps < 1 or steps % self.curve_points:
                raise ValueError(
                    f"steps of level {level!r} ({steps}) must be a positive multiple of "
                    f"curve_points ({self.curve_points})"
                )

    def curve_steps(self, level: str) -> list[int]:
        """The steps of the held-out evaluations during training at `level`, the base's 0
        first."""
        every = self.steps[level] // self.curve_points
        return [every * i for i in range(self.curve_points + 1)]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["levels"] = {k: list(v) for k, v in self.levels.items()}
        data["seeds"] = list(self.seeds)
        data["eval_ks"] = list(self.eval_ks)
        return data


PRESETS: dict[str, BenchSettings] = {
    "full": BenchSettings(
        levels={
            "mid": ("grpo", "amir", "amir_grad", "lens", "gspo_m2", "grpo_m2"),
            # Most groups all-wrong at the start while GRPO still learns: LENS's regime.
            "long": ("grpo", "lens", "lens_mixed", "lens_negative", "amir_lens"),
        },
        seeds=(0, 1, 2, 3, 4),
        steps={"mid": 160, "long": 100},
        questions_per_step=16,
        group_size=8,
        lr=1e-4,
        schedule="cosine",
        eval_problems=200,
        eval_n=16,
        eval_ks=(1, 4, 8, 16),
        curve_points=4,
        curve_problems=150,
        curve_n=8,
        max_new_tokens=96,
        model="arith-base",
    ),
    "quick": BenchSettings(
        levels={"mid": ("grpo", "amir", "lens", "gspo_m2")},
        seeds=(0, 1),
        steps={"mid": 40},
        questions_per_step=16,
        group_size=8,
        lr=1e-4,
        schedule="cosine",
        eval_problems=100,
        eval_n=16,
        eval_ks=(1, 4, 8, 16),
        curve_points=2,
        curve_problems=100,
        curve_n=8,
        max_new_tokens=96,
        model="arith-base",
    ),
    # GRPO at a constant learning rate (after warm-up), evaluated every 25 steps: where its
    # held-out pass@1 stops rising, which sized the full preset.
    "plateau": BenchSettings(
        levels={"mid": ("grpo",), "long": ("grpo",)},
        seeds=(0,),
        steps={"mid": 200, "long": 200},
        questions_per_step=16,
        group_size=8,
        lr=1e-4,
        schedule="constant",
        eval_problems=150,
        eval_n=8,
        eval_ks=(1, 4, 8),
        curve_points=8,
        curve_problems=150,
        curve_n=8,
        max_new_tokens=96,
        model="arith-base",
    ),
    "smoke": BenchSettings(
        levels={"easy": tuple(METHODS)},
        seeds=(0, 1),
        steps={"easy": 4},
        questions_per_step=4,
        group_size=4,
        lr=1e-4,
        schedule="cosine",
        eval_problems=12,
        eval_n=4,
        eval_ks=(1, 4),
        curve_points=2,
        curve_problems=8,
        curve_n=2,
        max_new_tokens=64,
        model="arith-base-quick",
    ),
}


# Presets whose complete runs write bench/results/NAME.md (and .json, figures).
COMMITTED = {"full": "learning", "plateau": "learning-plateau"}


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
    """The baseline of every level, then every (seed, level, method) run, seeds outermost (a
    bench stopped early holds every method for its first seeds, so its differences stay
    paired), the CONTROLS' runs last."""
    specs = [RunSpec(level, BASE, 0) for level in settings.levels]
    for methods in settings.levels.values():
        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; valid: {', '.join(METHODS)}")
    for controls in (False, True):
        for seed in settings.seeds:
            for level, methods in settings.levels.items():
                specs += [
                    RunSpec(level, m, seed) for m in methods if (m in CONTROLS) == controls
                ]
    return specs


def train_overrides(spec: RunSpec, settings: BenchSettings, run_dir: Path) -> list[str]:
    """Overrides of configs/testbed_arith.yaml for one training run: a checkpoint at every
    curve step (all kept, for the evaluations during training) and the LENS diagnostic on."""
    return [
        f"model.name={settings.model}",
        f"data.options.level={spec.level}",
        f"rollout.group_size={settings.group_size}",
        f"rollout.questions_per_step={settings.questions_per_step}",
        f"rollout.max_new_tokens={settings.max_new_tokens}",
        f"rollout.batch_size={settings.group_size * settings.questions_per_step}",
        f"train.micro_batch_size={settings.group_size * settings.questions_per_step}",
        f"optim.lr={settings.lr}",
        f"optim.schedule={settings.schedule}",
        f"train.max_steps={settings.steps[spec.level]}",
        f"train.save_every={settings.steps[spec.level] // settings.curve_points}",
        "train.keep_checkpoints=0",
        "train.log_all_wrong_gradient=true",
        f"train.seed={spec.seed}",
        f"train.output_dir={run_dir}",
        *METHODS[spec.method].overrides,
    ]


# ---------------------------------------------------------------------------------------------
# One run: train (or resume), evaluate during and after training, summarise


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    model_name: str,
    level: str,
    problems: int,
    n: int,
    ks: Sequence[int],
    max_new_tokens: int,
    output_dir: Path,
) -> dict[str, Any]:
    """Evaluate `model` on the first `problems` `arith` test problems of `level`, n samples each
    at temperature 1.0 (groupwise.evaluation.evaluate: resumable, samples saved with their mean
    log-probs). Returns {"results": the level's pass@k entry, "counts": correct samples per
    problem in problem order, "margin": mean preference margin over the problems with correct
    and incorrect samples (groupwise analyze margin) or None, "margin_problems": their count}."""
    from groupwise.analysis.preference_margin import preference_margins
    from groupwise.analysis.runs import load_run
    from groupwise.data import load_benchmark, render_prompt
    from groupwise.evaluation import EvalConfig, evaluate
    from groupwise.rollout import TransformersGenerator
    from groupwise.scoring import rollout_mean_logp

    bench = f"arith:{level}"
    config = EvalConfig(
        model=model_name,
        benchmarks=(bench,),
        n=n,
        ks=tuple(ks),
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        prompt="plain",
        batch_size=256,
        seed=0,
    )
    items = load_benchmark("arith", split="test", level=level, size=problems)
    results = evaluate(
        config,
        {bench: items},
        TransformersGenerator(model, tokenizer, batch_size=config.batch_size),
        output_dir,
        prompt_fn=lambda p: render_prompt(p, "plain", tokenizer),
        logp_fn=partial(rollout_mean_logp, model, batch_size=64),
        progress=False,
    )
    groups = load_run("run", output_dir).by_problem()
    margins = preference_margins(groups)
    return {
        "results": results[bench],
        "counts": [sum(s.correct for s in groups[(bench, p.id)]) for p in items],
        "margin": statistics.fmean(margins.values()) if margins else None,
        "margin_problems": len(margins),
    }


def read_steps(metrics_path: Path) -> dict[str, list[float]]:
    """{key: [value per step]} for STEP_KEYS from a run's metrics.jsonl (NaN where absent)."""
    from groupwise.records import iter_jsonl

    records = [row for _, row in iter_jsonl(metrics_path)]
    return {key: [float(r.get(key, math.nan)) for r in records] for key in ("step", *STEP_KEYS)}


def _curve_point(step: int, evaluation: Mapping[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    point = {"step": step, "margin": evaluation["margin"]}
    return point | {f"pass@{k}": evaluation["results"][f"pass@{k}"] for k in ks}


def run_one(spec: RunSpec, settings: BenchSettings, root: Path, progress: bool = False) -> dict:
    """Train (resuming a killed run) and evaluate one run; returns and saves its summary.

    A run whose summary.json exists is not touched again.
    """
    folder = spec.folder(root)
    summary_path = folder / "summary.json"
    if summary_path.is_file():
        return json.loads(summary_path.read_text())
    from groupwise.models import load_model
    from groupwise.train.checkpoint import load_weights_into
    from groupwise.train.config import load_config
    from groupwise.train.trainer import Trainer

    s = settings
    curve_eval = partial(
        evaluate_policy,
        level=spec.level,
        problems=s.curve_problems,
        n=s.curve_n,
        ks=[k for k in s.eval_ks if k <= s.curve_n],
        max_new_tokens=s.max_new_tokens,
    )
    started = time.perf_counter()
    steps: dict[str, list[float]] = {}
    curve = []
    if spec.method == BASE:
        model_name = s.model
        model, tokenizer = load_model(model_name)
        trained = time.perf_counter()
        first = curve_eval(model, tokenizer, model_name, output_dir=folder / "curve" / "step-0")
        curve.append(_curve_point(0, first, curve_eval.keywords["ks"]))
    else:
        final = folder / "final" / "model"
        if not (final / "config.json").is_file():
            config = load_config(CONFIG, train_overrides(spec, s, folder))
            config.train.progress = progress
            trainer = Trainer(config, resume=True)
            trainer.train()
            if trainer.stop_signal is not None:
                raise SystemExit(f"{spec.name}: stopped by signal {trainer.stop_signal} after a "
                                 "checkpoint; rerun the same command to resume")
        trained = time.perf_counter()
        model_name = str(final.resolve())
        model, tokenizer = load_model(s.model)
        for step in s.curve_steps(spec.level)[1:]:
            checkpoint = folder / "checkpoints" / f"step-{step}"
            load_weights_into(model, checkpoint)
            model.eval()
            out = folder / "curve" / checkpoint.name
            point = curve_eval(model, tokenizer, f"{model_name}@{step}", output_dir=out)
            curve.append(_curve_point(step, point, curve_eval.keywords["ks"]))
        steps = read_steps(folder / "metrics.jsonl")
    # The last checkpoint holds the final weights (the trainer saves at max_steps).
    final_eval = evaluate_policy(
        model, tokenizer, model_name, spec.level, s.eval_problems, s.eval_n, s.eval_ks,
        s.max_new_tokens, folder / "eval",
    )
    summary = {
        "level": spec.level,
        "method": spec.method,
        "seed": spec.seed,
        **final_eval,
        "curve": curve,
        "steps": steps,
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
# Aggregation


def by_run(summaries: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[Mapping]]]:
    """{level: {method: [summaries sorted by seed]}}, methods in METHODS order, base first."""
    out: dict[str, dict[str, list[Mapping]]] = {}
    order = [BASE, *METHODS]
    for s in sorted(summaries, key=lambda s: (s["level"], order.index(s["method"]), s["seed"])):
        out.setdefault(s["level"], {}).setdefault(s["method"], []).append(s)
    return out


def per_problem_pass(summary: Mapping[str, Any], n: int, k: int) -> np.ndarray:
    """[P] pass@k of each held-out problem of one run's final evaluation."""
    from groupwise.metrics import pass_at_k

    return np.asarray(pass_at_k(n, np.asarray(summary["counts"]), k), dtype=float).reshape(-1)


def _edges(values: Sequence[float], fraction: float = 0.1) -> list[float]:
    """[mean of the first `fraction` of the values, mean of the last], NaNs ignored."""
    count = max(1, round(fraction * len(values)))
    return [float(np.nanmean(values[:count])), float(np.nanmean(values[-count:]))]


def aggregate(summaries: Sequence[Mapping[str, Any]], settings: BenchSettings) -> dict[str, Any]:
    """The numbers of the results file, per level: "table" (per method: seeds, pass@k per seed
    and their mean and sd in percent, training accuracy and all-wrong groups over the first
    and last 10 % of steps, minutes per run; the base row's pass@k_ci), "differences" (per
    method and k: difference_to_reference against GRPO, in points), "curve" (per method: the
    held-out pass@1 and margin per curve step, mean and sd over seeds), "lens" and "amir"
    (mechanism_numbers)."""
    out: dict[str, Any] = {}
    n, ks = settings.eval_n, settings.eval_ks
    for level, methods in by_run(summaries).items():
        table: dict[str, Any] = {}
        for method, runs in methods.items():
            row: dict[str, Any] = {
                "label": "base policy" if method == BASE else METHODS[method].label,
                "seeds": [r["seed"] for r in runs],
                "minutes": statistics.fmean(
                    (r["seconds_train"] + r["seconds_eval"]) / 60 for r in runs
                ),
            }
            for k in ks:
                values = [100 * r["results"][f"pass@{k}"] for r in runs]
                row[f"pass@{k}"] = values
                row[f"pass@{k}_mean"] = statistics.fmean(values)
                row[f"pass@{k}_sd"] = statistics.stdev(values) if len(values) > 1 else 0.0
                if method == BASE:
                    row[f"pass@{k}_ci"] = [100 * x for x in runs[0]["results"][f"pass@{k}_ci"]]
            if method != BASE:
                for key, name in (("accuracy", "train_accuracy"), ("group_all_wrong", "all_wrong")):
                    edges = [_edges(r["steps"][key]) for r in runs]
                    row[name] = [statistics.fmean(e[i] for e in edges) for i in (0, 1)]
            table[method] = row
        out[level] = {
            "table": table,
            "differences": differences(methods, n, ks),
            "curve": curves(methods),
            **mechanism_numbers(methods, settings),
        }
    return out


def differences(
    methods: Mapping[str, Sequence[Mapping]], n: int, ks: Sequence[int]
) -> dict[str, dict[str, dict[str, float]]]:
    """{method: {"pass@k": difference_to_reference (points)}} for every trained method other
    than GRPO, over the seeds both have."""
    if REFERENCE not in methods:
        return {}
    reference = {r["seed"]: r for r in methods[REFERENCE]}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for method, runs in methods.items():
        paired = [r for r in runs if r["seed"] in reference]
        if method in (BASE, REFERENCE) or not paired:
            continue
        out[method] = {}
        for k in ks:
            mine = np.stack([per_problem_pass(r, n, k) for r in paired])
            theirs = np.stack([per_problem_pass(reference[r["seed"]], n, k) for r in paired])
            diff = difference_to_reference(mine, theirs)
            out[method][f"pass@{k}"] = {
                key: 100 * value if key != "distinguishable" else value
                for key, value in diff.items()
            } | {"seeds": len(paired)}
    return out


def curves(methods: Mapping[str, Sequence[Mapping]]) -> dict[str, list[dict[str, Any]]]:
    """{method: [{"step", "pass@1", "pass@1_sd", "margin", "margin_sd"}]} over the curve steps
    (pass@1 in percent, margin in nats/token), each trained method starting from the base's
    step 0."""
    base = methods[BASE][0]["curve"] if BASE in methods else []
    out: dict[str, list[dict[str, Any]]] = {}
    for method, runs in methods.items():
        points = [[*base, *r["curve"]] if method != BASE else r["curve"] for r in runs]
        rows = []
        for i, point in enumerate(points[0]):
            at = [p[i] for p in points if len(p) > i]
            pass1 = [100 * p["pass@1"] for p in at]
            margin = [p["margin"] for p in at if p["margin"] is not None]
            rows.append({
                "step": point["step"],
                "pass@1": statistics.fmean(pass1),
                "pass@1_sd": statistics.stdev(pass1) if len(pass1) > 1 else 0.0,
                "margin": statistics.fmean(margin) if margin else None,
                "margin_sd": statistics.stdev(margin) if len(margin) > 1 else 0.0,
                "margins": margin,
            })
        out[method] = rows
    return out


def _ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    total = float(np.nansum(denominator))
    return float(np.nansum(numerator)) / total if total > 0 else math.nan


def mechanism_numbers(
    methods: Mapping[str, Sequence[Mapping]], settings: BenchSettings
) -> dict[str, dict[str, dict[str, Any]]]:
    """{"lens": {method: ...}, "amir": {method: ...}} from the per-step logs of every trained
    method. LENS (train.log_all_wrong_gradient): "all_wrong" (fraction of groups all-wrong),
    "active" (of those, the fraction with a non-zero advantage, pooled over steps; per seed and
    mean), "grad_share" (mean over steps of the all-wrong rows' share of the gradient norm; per
    seed, mean, and the first and last 10 % of steps). AMIR: "lambda" (mean, fraction of steps
    at the floor and at the ceiling, the last step's), "pairs_per_group" (mean)."""
    from groupwise.train.config import AlgorithmConfig

    floor, ceiling = AlgorithmConfig.lambda_min, AlgorithmConfig.lambda_max
    lens: dict[str, dict[str, Any]] = {}
    amir: dict[str, dict[str, Any]] = {}
    for method, runs in methods.items():
        if method == BASE:
            continue
        steps = [r["steps"] for r in runs]
        active = [_ratio(s["group_all_wrong_active"], s["group_all_wrong"]) for s in steps]
        shares = [float(np.nanmean(s["all_wrong_grad_share"])) for s in steps]
        edges = [_edges(s["all_wrong_grad_share"]) for s in steps]
        lens[method] = {
            "all_wrong": float(np.mean([np.nanmean(s["group_all_wrong"]) for s in steps])),
            "active": active,
            "active_mean": float(np.nanmean(active)),
            "grad_share": shares,
            "grad_share_mean": float(np.mean(shares)),
            "grad_share_first": float(np.mean([e[0] for e in edges])),
            "grad_share_last": float(np.mean([e[1] for e in edges])),
        }
        if method in AMIR_METHODS:
            lam = np.array([s["lambda"] for s in steps], dtype=float)
            amir[method] = {
                "lambda_mean": float(lam.mean()),
                "lambda_floor": float((lam <= floor * (1 + 1e-6)).mean()),
                "lambda_ceiling": float((lam >= ceiling * (1 - 1e-6)).mean()),
                "lambda_last": float(lam[:, -1].mean()),
                "pairs_per_group": float(np.mean([np.mean(s["pairs_per_group"]) for s in steps])),
            }
    return {"lens": lens, "amir": amir}


# ---------------------------------------------------------------------------------------------
# Tables and sentences


def _label(method: str) -> str:
    return "base policy" if method == BASE else METHODS[method].label


def _interval(low: float, high: float) -> str:
    return "–" if math.isnan(low) else f"[{low:+.1f}, {high:+.1f}]"


def budget_table(settings: BenchSettings) -> str:
    """Per level and method: its overrides and the questions, completions and optimizer steps
    of a run, read from the config each run is built from."""
    from groupwise.train.config import load_config

    lines = [
        "| level | method | overrides of configs/testbed_arith.yaml | questions | completions | "
        "optimizer steps |",
        "|---|---|---|---|---|---|",
    ]
    for level, methods in settings.levels.items():
        for method in methods:
            config = load_config(
                CONFIG, train_overrides(RunSpec(level, method, 0), settings, Path("unused"))
            )
            algo, rollout, steps = config.algorithm, config.rollout, config.train.max_steps
            questions = steps * rollout.questions_per_step
            updates = steps * algo.minibatches * algo.num_iterations
            overrides = ", ".join(f"`{o}`" for o in METHODS[method].overrides) or "none"
            lines.append(
                f"| {level} | {METHODS[method].label} | {overrides} | {questions} | "
                f"{questions * rollout.group_size} | {updates} |"
            )
    return "\n".join(lines)


def pass_table(level: Mapping[str, Any], ks: Sequence[int]) -> str:
    """pass@k per method: mean ± sd over seeds (the base: its 95 % bootstrap over problems),
    training accuracy and all-wrong groups over the first and last 10 % of steps, minutes."""
    lines = [
        "| method | seeds | "
        + " | ".join(f"pass@{k} (%)" for k in ks)
        + " | train acc first→last | all-wrong groups first→last | min/run |",
        "|---|---|" + "---|" * len(ks) + "---|---|---|",
    ]
    for method, row in level["table"].items():
        if method == BASE:
            cells = [
                f"{row[f'pass@{k}_mean']:.1f} [{row[f'pass@{k}_ci'][0]:.1f}, "
                f"{row[f'pass@{k}_ci'][1]:.1f}]"
                for k in ks
            ]
            lines.append(
                f"| base policy (95 % CI over problems) | – | {' | '.join(cells)} | – | – | "
                f"{row['minutes']:.1f} |"
            )
            continue
        cells = [
            f"{row[f'pass@{k}_mean']:.1f} ± {row[f'pass@{k}_sd']:.1f}"
            if len(row["seeds"]) > 1
            else f"{row[f'pass@{k}_mean']:.1f}"
            for k in ks
        ]
        acc, wrong = row["train_accuracy"], row["all_wrong"]
        lines.append(
            f"| {row['label']} | {len(row['seeds'])} | {' | '.join(cells)} | "
            f"{100 * acc[0]:.0f}→{100 * acc[1]:.0f} % | {100 * wrong[0]:.0f}→{100 * wrong[1]:.0f} %"
            f" | {row['minutes']:.1f} |"
        )
    return "\n".join(lines)


def difference_table(level: Mapping[str, Any], ks: Sequence[int]) -> str:
    """Per method and k: the mean difference to GRPO in points, its paired-seed interval and
    its problem-bootstrap interval; bold where both exclude zero."""
    lines = [
        "| method | " + " | ".join(f"Δ pass@{k}: mean [seeds] [problems]" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    for method, per_k in level["differences"].items():
        cells = []
        for k in ks:
            d = per_k[f"pass@{k}"]
            text = (
                f"{d['mean']:+.1f} {_interval(d['seed_low'], d['seed_high'])} "
                f"{_interval(d['problem_low'], d['problem_high'])}"
            )
            cells.append(f"**{text}**" if d["distinguishable"] else text)
        lines.append(f"| {_label(method)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curve_table(level: Mapping[str, Any]) -> str:
    """Held-out pass@1 (mean ± sd over seeds) at each curve step, per method."""
    curve = level["curve"]
    trained = [m for m in curve if m != BASE]
    if not trained:
        return ""
    steps = [p["step"] for p in curve[trained[0]]]
    lines = [
        "| method | " + " | ".join(f"step {s}" for s in steps) + " |",
        "|---|" + "---|" * len(steps),
    ]
    for method in trained:
        cells = [f"{p['pass@1']:.1f} ± {p['pass@1_sd']:.1f}" for p in curve[method]]
        lines.append(f"| {_label(method)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def lens_table(level: Mapping[str, Any]) -> str:
    """Per method: all-wrong groups, the share of them with a gradient, and their share of the
    gradient norm (mean over steps and seeds; first and last 10 % of steps)."""
    lines = [
        "| method | all-wrong groups | of them with a gradient | their share of the gradient "
        "norm: mean (first→last 10 % of steps) |",
        "|---|---|---|---|",
    ]
    for method, row in level["lens"].items():
        lines.append(
            f"| {_label(method)} | {100 * row['all_wrong']:.0f} % | "
            f"{100 * row['active_mean']:.0f} % | {row['grad_share_mean']:.2f} "
            f"({row['grad_share_first']:.2f}→"
            f"{row['grad_share_last']:.2f}) |"
        )
    return "\n".join(lines)


def amir_table(level: Mapping[str, Any]) -> str:
    """Per AMIR method: lambda (mean, share of steps at the floor and at the ceiling, last),
    pairs per group, and the held-out preference margin at each curve step."""
    if not level["amir"]:
        return ""
    curve = level["curve"]
    shown = [m for m in (REFERENCE, *AMIR_METHODS) if m in curve]
    steps = [p["step"] for p in curve[shown[0]]]
    lines = [
        "| method | λ mean | steps at λ floor | at λ ceiling | λ last | pairs/group | "
        + " | ".join(f"margin step {s}" for s in steps)
        + " |",
        "|---|---|---|---|---|---|" + "---|" * len(steps),
    ]
    for method in shown:
        row = level["amir"].get(method)
        head = (
            f"{row['lambda_mean']:.4f} | {100 * row['lambda_floor']:.0f} % | "
            f"{100 * row['lambda_ceiling']:.0f} % | {row['lambda_last']:.4f} | "
            f"{row['pairs_per_group']:.1f}"
            if row
            else "– | – | – | – | –"
        )
        margins = [
            "–" if p["margin"] is None else f"{p['margin']:.3f} ± {p['margin_sd']:.3f}"
            for p in curve[method]
        ]
        lines.append(f"| {_label(method)} | {head} | " + " | ".join(margins) + " |")
    return "\n".join(lines)


def _verdict(d: Mapping[str, float]) -> str:
    seeds = _interval(d["seed_low"], d["seed_high"])
    return (
        f"{d['mean']:+.1f} points (seeds {seeds}, problems "
        f"{_interval(d['problem_low'], d['problem_high'])})"
    )


def _pair(runs_a: Sequence[Mapping], runs_b: Sequence[Mapping], n: int, k: int) -> dict:
    """difference_to_reference of a against b (points) over the seeds both have."""
    other = {r["seed"]: r for r in runs_b}
    paired = [r for r in runs_a if r["seed"] in other]
    mine = np.stack([per_problem_pass(r, n, k) for r in paired])
    theirs = np.stack([per_problem_pass(other[r["seed"]], n, k) for r in paired])
    d = difference_to_reference(mine, theirs)
    return {key: 100 * v if key != "distinguishable" else v for key, v in d.items()}


def _seed_interval(values: Sequence[float]) -> str:
    if len(values) < 2:
        return f"{statistics.fmean(values):+.2f} (one seed)"
    mean, low, high = paired_seed_interval(values)
    return f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]"


def reading(
    numbers: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]], settings: BenchSettings
) -> str:
    """Sentences computed from the numbers: gain over the base, whether GRPO still rises at the
    end, which differences to GRPO are distinguishable from zero, the papers' claims checked
    against the intervals, and the mechanisms' headline numbers."""
    n, top = settings.eval_n, max(settings.eval_ks)
    runs = by_run(summaries)
    lines = []
    for level, num in numbers.items():
        table, diffs, methods = num["table"], num["differences"], runs[level]
        lines.append(f"### `{level}`")
        if BASE in table and REFERENCE in table:
            base = table[BASE]["pass@1_mean"]
            gains = [v - base for v in table[REFERENCE]["pass@1"]]
            lines.append(
                f"- Base pass@1 {base:.1f} %; GRPO's gain over it: "
                f"{_seed_interval(gains)} points (95 % t-interval over seeds)."
            )
        if REFERENCE in methods and BASE in methods:
            base_curve = methods[BASE][0]["curve"]
            points = [[*base_curve, *r["curve"]] for r in methods[REFERENCE]]
            last = [100 * (c[-1]["pass@1"] - c[-2]["pass@1"]) for c in points]
            steps = [p["step"] for p in points[0]]
            lines.append(
                f"- GRPO's held-out pass@1 from step {steps[-2]} to {steps[-1]}: "
                f"{_seed_interval(last)} points (95 % t-interval over seeds; an interval "
                "containing 0 means no measurable rise over the last stretch)."
            )
        for k in sorted({1, top}):
            key = f"pass@{k}"
            apart = [m for m, d in diffs.items() if d[key]["distinguishable"]]
            together = [m for m in diffs if m not in apart]
            if apart:
                lines.append(
                    f"- {key}: distinguishable from GRPO (both intervals exclude 0): "
                    + "; ".join(f"{_label(m)} {_verdict(diffs[m][key])}" for m in apart)
                    + "."
                )
            if together:
                lines.append(
                    f"- {key}: not distinguishable from GRPO: "
                    + ", ".join(
                        f"{_label(m)} ({diffs[m][key]['mean']:+.1f})" for m in together
                    )
                    + "."
                )
        if "gspo_m2" in methods and "grpo_m2" in methods:
            d = _pair(methods["gspo_m2"], methods["grpo_m2"], n, 1)
            lines.append(
                f"- GSPO M=2 against its control GRPO M=2 (same samples and optimizer steps): "
                f"pass@1 {_verdict(d)}"
                + (" – distinguishable." if d["distinguishable"] else " – not distinguishable.")
            )
        lines += _claims(level, num, methods, top)
    return "\n".join(lines)


def _claims(
    level: str, num: Mapping[str, Any], methods: Mapping[str, Sequence[Mapping]], top: int
) -> list[str]:
    """The papers' claims at this level, each against the measured intervals."""
    diffs, lines = num["differences"], []

    def outcome(d: Mapping[str, float]) -> str:
        if not d["distinguishable"]:
            return "not reproduced (no distinguishable difference)"
        return "reproduced" if d["mean"] > 0 else "reversed (distinguishably worse)"

    if "lens" in diffs:
        d1, dk = diffs["lens"]["pass@1"], diffs["lens"][f"pass@{top}"]
        lines.append(
            f"- LENS paper (MATH: LENS above GRPO at pass@1 and more so at pass@16): here "
            f"pass@1 {_verdict(d1)}, pass@{top} {_verdict(dk)}: {outcome(d1)} at pass@1, "
            f"{outcome(dk)} at pass@{top}."
        )
    ablation = [m for m in ("lens_mixed", "lens_negative", "lens") if m in diffs]
    if len(ablation) == 3:
        order = sorted(ablation, key=lambda m: diffs[m]["pass@1"]["mean"])
        lines.append(
            "- LENS ablation (paper Table 2: GRPO < mixed_only < negative_only < full at pass@1):"
            " here, by mean pass@1 difference to GRPO, "
            + " < ".join(f"{_label(m)} ({diffs[m]['pass@1']['mean']:+.1f})" for m in order)
            + "; the ablations differ from GRPO distinguishably only where marked above."
        )
    if "amir" in diffs:
        d1 = diffs["amir"]["pass@1"]
        lines.append(f"- AMIR-GRPO paper (pass@1 above GRPO): here {_verdict(d1)}: {outcome(d1)}.")
    margins = {m: [r["margin"] for r in runs] for m, runs in methods.items() if m != BASE}
    grpo_margin = margins.get(REFERENCE)
    for method in (m for m in AMIR_METHODS if m in margins and grpo_margin):
        other = {r["seed"]: r["margin"] for r in methods[REFERENCE]}
        paired = [
            r["margin"] - other[r["seed"]]
            for r in methods[method]
            if r["seed"] in other and r["margin"] is not None and other[r["seed"]] is not None
        ]
        ratio = statistics.fmean(margins[method]) / statistics.fmean(grpo_margin)
        lines.append(
            f"- Preference margin (paper Figure 4: AMIR-GRPO's mean margin 2.7x GRPO's), final "
            f"evaluation: {_label(method)} / GRPO = {ratio:.2f}x; difference "
            f"{_seed_interval(paired)} nats/token (95 % t-interval over seeds)."
        )
        curve = num["curve"]
        start, end = curve[method][0]["margin"], curve[method][-1]["margin"]
        grpo_end = curve[REFERENCE][-1]["margin"]
        if None not in (start, end, grpo_end):
            lines.append(
                f"  Over training (held-out curve): {_label(method)}'s margin {start:.3f} → "
                f"{end:.3f}, GRPO's {start:.3f} → {grpo_end:.3f} nats/token."
            )
    for method, row in num["lens"].items():
        if method in LENS_METHODS or method == REFERENCE:
            lines.append(
                f"- {_label(method)}: {100 * row['active_mean']:.0f} % of the all-wrong groups "
                f"({100 * row['all_wrong']:.0f} % of all groups) carry a gradient; they hold "
                f"{row['grad_share_mean']:.2f} of the update's gradient norm on average "
                f"({row['grad_share_first']:.2f} over the first 10 % of steps, "
                f"{row['grad_share_last']:.2f} over the last)."
            )
    for method, row in num["amir"].items():
        lines.append(
            f"- {_label(method)}: λ at its floor on {100 * row['lambda_floor']:.0f} % of steps, "
            f"at its ceiling on {100 * row['lambda_ceiling']:.0f} %, mean {row['lambda_mean']:.4f}"
            f"; {row['pairs_per_group']:.1f} pairs per group."
        )
    return lines


# ---------------------------------------------------------------------------------------------
# Figures


def _moving_average(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing moving average over up to `window` values, NaNs ignored (NaN where the window
    holds none)."""
    x = np.asarray(values, dtype=float)
    out = np.full_like(x, np.nan)
    for i in range(len(x)):
        part = x[max(0, i - window + 1) : i + 1]
        if np.isfinite(part).any():
            out[i] = np.nanmean(part)
    return out


def _active_share(steps: Mapping[str, Sequence[float]]) -> np.ndarray:
    """Per step: of the all-wrong groups, the fraction with a non-zero advantage (NaN when the
    step has none)."""
    wrong = np.asarray(steps["group_all_wrong"], dtype=float)
    active = np.asarray(steps["group_all_wrong_active"], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(wrong > 0, active / wrong, np.nan)


PANELS: dict[str, tuple[str, Any]] = {
    "accuracy": ("training accuracy", lambda s: s["accuracy"]),
    "group_all_wrong": ("fraction of all-wrong groups", lambda s: s["group_all_wrong"]),
    "active": ("all-wrong groups with a gradient (fraction)", _active_share),
    "grad_share": ("all-wrong rows' share of the gradient norm",
                   lambda s: s["all_wrong_grad_share"]),
    "lambda": ("λ per step (log scale)", lambda s: s["lambda"]),
    "pairs_per_group": ("AMIR pairs per group", lambda s: s["pairs_per_group"]),
}


def _plot_steps(ax: Any, runs: Sequence[Mapping], panel: str, color: str, label: str) -> None:
    """Mean over seeds of the SMOOTH-step moving average of a per-step panel, shaded between
    the lowest and highest seed."""
    _, series = PANELS[panel]
    length = min(len(r["steps"]["step"]) for r in runs)
    smooth = np.stack([_moving_average(series(r["steps"])[:length], SMOOTH) for r in runs])
    steps = np.arange(1, length + 1)
    with warnings.catch_warnings():  # all-NaN columns (no all-wrong group at a step) stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        ax.plot(steps, np.nanmean(smooth, 0), color=color, label=f"{label} ({len(runs)} seeds)")
        if len(runs) > 1:
            ax.fill_between(steps, np.nanmin(smooth, 0), np.nanmax(smooth, 0), color=color,
                            alpha=0.12, linewidth=0)


def _plot_curve(ax: Any, points: Sequence[Mapping], key: str, color: str, label: str) -> None:
    """A held-out curve: mean over seeds with ± sd error bars at each evaluated step."""
    rows = [p for p in points if p[key] is not None]
    ax.errorbar([p["step"] for p in rows], [p[key] for p in rows],
                yerr=[p[f"{key}_sd"] for p in rows], color=color, label=label, marker="o",
                markersize=3, capsize=2)


def plot_figure(
    numbers: Mapping[str, Any],
    summaries: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    methods_shown: Sequence[str],
    path: Path,
) -> Path | None:
    """One PNG: a row per level that has any of `methods_shown`, a column per entry of
    `columns` (a PANELS key, or "pass@1" / "margin" for the held-out curves). None when no
    level has those methods."""
    from groupwise.analysis.figures import new_figure, save_figure, series_colors

    runs = by_run(summaries)
    levels = [lv for lv in runs if any(m in runs[lv] for m in methods_shown)]
    if not levels:
        return None
    colors = dict(zip(METHODS, series_colors(len(METHODS)), strict=True))
    fig, axes = new_figure(width=4.2 * len(columns), height=3.3 * len(levels),
                           ncols=len(columns), nrows=len(levels))
    for i, level in enumerate(levels):
        for method in (m for m in METHODS if m in methods_shown and m in runs[level]):
            for j, column in enumerate(columns):
                ax = axes[i, j]
                if column in ("pass@1", "margin"):
                    _plot_curve(ax, numbers[level]["curve"][method], column, colors[method],
                                METHODS[method].label)
                elif column not in ("lambda", "pairs_per_group") or method in AMIR_METHODS:
                    _plot_steps(ax, runs[level][method], column, colors[method],
                                METHODS[method].label)
        for j, column in enumerate(columns):
            ax = axes[i, j]
            title = {"pass@1": "held-out pass@1 (%)",
                     "margin": "held-out preference margin (nats/token)"}.get(column)
            ax.set_title(f"{level}: {title or PANELS[column][0]}", fontsize=9)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            if column == "lambda":
                ax.set_yscale("log")
        axes[i, 0].legend(fontsize=6)
    return save_figure(fig, path)


FIGURES: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    # suffix -> (columns, methods, caption)
    "": (
        ("pass@1", "accuracy", "group_all_wrong"),
        tuple(METHODS),
        "Held-out pass@1 at the curve steps (mean ± sd over seeds; step 0 is the base policy), "
        f"and per step the training accuracy and the fraction of all-wrong groups (mean over "
        f"seeds of a {SMOOTH}-step moving average, shaded between the lowest and highest seed).",
    ),
    "-lens": (
        ("active", "grad_share", "group_all_wrong"),
        (REFERENCE, *LENS_METHODS),
        "LENS's mechanism per step: of the all-wrong groups, the fraction with a non-zero "
        "advantage (a policy gradient); the all-wrong rows' share of the update's gradient norm "
        "(||g_all-wrong|| / ||g||, before clipping); the fraction of all-wrong groups.",
    ),
    "-amir": (
        ("lambda", "pairs_per_group", "margin"),
        (REFERENCE, *AMIR_METHODS),
        "AMIR-GRPO's mechanism: λ per step under the loss rule and the gradient rule, mined "
        "pairs per group, and the held-out preference margin (mean l(correct) − mean "
        "l(incorrect), `groupwise analyze margin`) at the curve steps (mean ± sd over seeds).",
    ),
}


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
    load_after: str,
    name: str = "learning",
) -> str:
    """learning.md, learning.json and the figures into each of `folders`; returns the text."""
    numbers = aggregate(summaries, settings)
    command = " ".join(shlex.quote(a) for a in ["python", *sys.argv])
    ks = settings.eval_ks
    seeds = sorted({s["seed"] for s in summaries if s["method"] != BASE})
    steps_text = ", ".join(f"{settings.steps[lv]} (`{lv}`)" for lv in settings.levels)
    level_sections = []
    for level, num in numbers.items():
        level_sections.append(f"""### level `{level}`

{pass_table(num, ks)}

Difference to GRPO, in points: the mean over seeds, its 95 % t-interval paired over seeds, and
its 95 % bootstrap interval over problems (seeds fixed); **bold**: both exclude zero.

{difference_table(num, ks)}

Held-out pass@1 (%) during training, first {settings.curve_problems} problems, n =
{settings.curve_n} (mean ± sd over seeds; step 0 is the base policy):

{curve_table(num)}""")
    mechanism_sections = []
    for level, num in numbers.items():
        mechanism_sections.append(f"#### `{level}`\n\n{lens_table(num)}\n\n{amir_table(num)}")
    figure_lines = [f"![{name}{suffix}]({name}{suffix}.png)\n\n{caption}"
                    for suffix, (_, _, caption) in FIGURES.items()]
    text = f"""# Learning testbed: GRPO, AMIR-GRPO, LENS, AMIR-GRPO + LENS, GSPO on `arith`

- command: `{command}`
- machine: {machine()}
- wall time: {wall_seconds / 60:.1f} min for the runs this invocation made (runs already
  complete were read back); load average (1/5/15 min) before: {load_before}; after:
  {load_after}
- training seeds: {seeds} (the same for every method: sampling and question order); the
  evaluation's problems and sampling seeds are the same for every run
- base policy: `{settings.model}` (groupwise.sft); every run fine-tunes all its weights from it
- every run: {steps_text} steps of {settings.questions_per_step} questions x
  {settings.group_size} completions, lr {settings.lr} ({settings.schedule} schedule, 10 %
  warm-up), binary 1/0 correctness reward, temperature 1.0, configs/testbed_arith.yaml
- held-out evaluation: the first {settings.eval_problems} `arith` test problems of the level
  (no question shared with train), n = {settings.eval_n} samples per problem at temperature
  1.0, unbiased pass@k (REFERENCE.md 4)

## Methods and budgets

AMIR-GRPO uses margin 0.5 (binary rewards: every correct/wrong pair), beta_dpo 0.5; LENS alpha
0.25. GSPO takes its extra optimizer steps from 2 PPO mini-batches of the same rollout batch
(the second is off-policy, so its tight clip acts), not from more samples; GRPO M=2, the same
split for GRPO, separates the effect of the extra steps from that of the sequence-level ratio.

{budget_table(settings)}

## pass@k on held-out problems

pass@k: mean ± standard deviation over seeds. The base row's interval is a 95 % bootstrap over
problems: the evaluation noise of one policy.

{chr(10).join(level_sections)}

## Mechanisms

LENS (`train.log_all_wrong_gradient`): per step, the all-wrong groups that carry a non-zero
advantage (so a policy gradient), and the all-wrong rows' share of the update's gradient norm.
AMIR-GRPO: λ per step under the official loss rule and under `lambda_measure: grad`, pairs per
group, and the held-out preference margin of `groupwise analyze margin` at the curve steps.

{chr(10).join(mechanism_sections)}

## Figures

{chr(10).join(figure_lines)}

## What the numbers say (computed from the intervals above)

{reading(numbers, summaries, settings)}
"""
    payload = {
        "settings": settings.to_dict(),
        "command": command,
        "wall_seconds": wall_seconds,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "numbers": numbers,
        "runs": [{k: v for k, v in s.items() if k != "steps"} for s in summaries],
    }
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.md").write_text(text)
        (folder / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
        for suffix, (columns, shown, _) in FIGURES.items():
            plot_figure(numbers, summaries, columns, shown, folder / f"{name}{suffix}.png")
    return text


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


def with_settings(settings: BenchSettings, assignments: Sequence[str]) -> BenchSettings:
    """`settings` with KEY=VALUE assignments of its RUN_KEYS applied (values read as YAML)."""
    import yaml

    changes: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep or key not in BenchSettings.RUN_KEYS:
            raise ValueError(
                f"--set {assignment!r}: expected KEY=VALUE with KEY one of "
                f"{', '.join(BenchSettings.RUN_KEYS)}"
            )
        value = yaml.safe_load(raw)
        changes[key] = tuple(value) if key == "eval_ks" else value
    if "lr" in changes:
        changes["lr"] = float(changes["lr"])
    return dataclasses.replace(settings, **changes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--quick", action="store_true", help="the quick preset (--preset quick)")
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
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one setting of the preset (repeatable), e.g. --set lr=3e-4 --set steps=150",
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
    preset = "quick" if args.quick else args.preset
    settings = PRESETS[preset]
    if args.seeds is not None:
        settings = dataclasses.replace(settings, seeds=tuple(range(args.seeds)))
    try:
        settings = select(with_settings(settings, args.set), args.levels, args.methods)
    except ValueError as err:
        parser.error(str(err))
    root = args.output or REPO / "runs" / (
        "learning" if preset == "full" else f"learning-{preset}"
    )
    check_output(settings, root)
    load_before = load_average()
    started = time.perf_counter()
    _worker_init(args.threads)
    # Train (or read) the base policy once, before parallel workers would each train it.
    from groupwise.models import load_model

    load_model(settings.model)
    summaries = run_bench(settings, root, args.jobs, args.threads)
    # Only a complete, unchanged run of the full or plateau preset replaces committed results.
    complete = preset in COMMITTED and not args.set and all(
        option is None for option in (args.levels, args.methods, args.seeds)
    )
    folders = [root] + ([RESULTS_DIR] if complete else [])
    name = COMMITTED.get(preset, "learning")
    text = write_results(
        settings,
        summaries,
        folders,
        wall_seconds=time.perf_counter() - started,
        load_before=load_before,
        load_after=load_average(),
        name=name,
    )
    print(text)
    print("written: " + ", ".join(str(f / f"{name}.md") for f in folders))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
