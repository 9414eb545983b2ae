"""What the learning testbed runs: its methods, presets and run specs, and each run's overrides of
configs/testbed_arith.yaml (testbed/learning.py runs them, testbed/report.py reports them).
A leaf: it imports nothing else of testbed/."""

from __future__ import annotations

import dataclasses
import os
import platform
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from groupwise.models import register_model_alias
from groupwise.sft import SFTSettings, load_base_policy

REPO = Path(__file__).resolve().parents[1]

CONFIG = REPO / "configs" / "testbed_arith.yaml"

RESULTS_DIR = REPO / "testbed" / "results"


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

# The GRPO family as the peers ship it (docs/algorithms.md, "Policy losses: CISPO, GMPO, SAPO",
# "REINFORCE++-baseline", "Entropy controls"), each one change from GRPO.
FAMILY: dict[str, Method] = {
    "cispo": Method("CISPO", ("algorithm.policy_loss=cispo",), "clipped IS weight x A log pi"),
    "gmpo": Method("GMPO", ("algorithm.policy_loss=gmpo",), "geometric mean of token ratios"),
    "sapo": Method("SAPO", ("algorithm.policy_loss=sapo",), "soft sigmoid gate for the clip"),
    "rpp_baseline": Method(
        "REINFORCE++-baseline",
        ("algorithm.advantage=reinforce_plus_plus_baseline",),
        "group-mean baseline, whitened over the batch's tokens",
    ),
    "entropy_bonus": Method(
        "GRPO + entropy bonus", ("algorithm.entropy_coef=0.001",), "fixed coefficient 0.001"
    ),
    "top_entropy": Method(
        "GRPO top-20% entropy",
        ("algorithm.top_entropy_quantile=0.2",),
        "the policy loss on the 20 % highest-entropy tokens",
    ),
}
METHODS.update(FAMILY)

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
    "entropy",
)


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
    for training and evaluation. model: the base policy alias. extra: overrides of every run of
    the bench (the family preset's 2 mini-batches: on-policy, with one update per batch, the
    losses it compares have one gradient).
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
    extra: tuple[str, ...] = ()

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
        "extra",
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
        data["extra"] = list(self.extra)
        return data


PRESETS: dict[str, BenchSettings] = {
    "full": BenchSettings(
        levels={
            # Sized to about 4.5 hours on 2 cores (268 min measured): AMIR-GRPO on long,
            # AMIR-GRPO + LENS on mid and the LENS ablations on mid did not fit.
            "mid": ("grpo", "amir", "amir_grad", "lens", "gspo_m2", "grpo_m2"),
            # Half the groups all-wrong at the start, more as GRPO sharpens the policy, while
            # GRPO still lifts pass@1: LENS's regime.
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
        steps={"mid": 60},
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
    # The family against GRPO at the quick preset's size, 40 steps: what 5 seeds cost in about
    # an hour on 2 cores. Two mini-batches per rollout batch, every method: with one update per
    # batch the ratio is 1 and CISPO, GMPO and SAPO have GRPO's gradient (their seed-0 runs
    # at one mini-batch ended with GRPO's token entropy to 1e-7).
    "family": BenchSettings(
        levels={"mid": ("grpo", *FAMILY)},
        seeds=(0, 1, 2, 3, 4),
        steps={"mid": 40},
        questions_per_step=16,
        group_size=8,
        lr=1e-4,
        schedule="cosine",
        eval_problems=100,
        eval_n=8,
        eval_ks=(1, 4, 8),
        curve_points=2,
        curve_problems=50,
        curve_n=4,
        max_new_tokens=96,
        model="arith-base",
        extra=("algorithm.minibatches=2",),
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

# Presets whose complete runs write testbed/results/NAME.md (and .json, figures).
COMMITTED = {"full": "learning", "plateau": "learning-plateau", "family": "family"}


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
                specs += [RunSpec(level, m, seed) for m in methods if (m in CONTROLS) == controls]
    return specs


def train_overrides(spec: RunSpec, settings: BenchSettings, run_dir: Path) -> list[str]:
    """Overrides of configs/testbed_arith.yaml for one training run: a checkpoint at every
    curve step (all kept, for the evaluations during training), the LENS diagnostic and the
    token entropy logged."""
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
        "algorithm.log_entropy=true",  # every method's token entropy, the controls' measure
        f"train.seed={spec.seed}",
        f"train.output_dir={run_dir}",
        *settings.extra,
        *METHODS[spec.method].overrides,
    ]


def machine() -> str:
    import transformers

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; python "
        f"{platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}"
    )


def names(text: str) -> tuple[str, ...]:
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
    """`settings` with KEY=VALUE assignments of its RUN_KEYS applied: values read as YAML and
    checked against the field's type (groupwise.config; a ConfigError is a ValueError)."""
    from groupwise.config import apply_override, coerce

    hints = typing.get_type_hints(BenchSettings)
    changes: dict[str, Any] = {}
    for assignment in assignments:
        key = assignment.partition("=")[0].strip()
        if "=" not in assignment or key not in BenchSettings.RUN_KEYS:
            raise ValueError(
                f"--set {assignment!r}: expected KEY=VALUE with KEY one of "
                f"{', '.join(BenchSettings.RUN_KEYS)}"
            )
        apply_override(changes, assignment)
        changes[key] = coerce(changes[key], hints[key], f"--set {key}")
    return dataclasses.replace(settings, **changes)
