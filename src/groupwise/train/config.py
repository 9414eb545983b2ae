"""Training configuration: the sections of `groupwise train`'s config and their checks.

Every option is declared here with its default and where it comes from (paper, official code,
or ours; see docs/algorithms.md); the algorithm options every engine shares come from
groupwise.algorithms.AlgorithmOptions. Reading YAML, overrides and type checks are
groupwise.config; the range and cross-field checks are `Config.validate`. Unknown keys and bad
values are errors that name the valid choices.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from groupwise.algorithms import get_advantage_estimator, unreachable_margin
from groupwise.algorithms.options import AlgorithmOptions
from groupwise.config import ConfigError, apply_override, build, read_yaml
from groupwise.data import TEMPLATES, MixPart, benchmark_options, benchmark_splits
from groupwise.rewards import checking_mode, component_names, correct_value, get_component

DEFAULT_BENCHMARK = "gsm8k"


@dataclass
class ModelConfig:
    """The policy: which model, in what precision, trained how (LoRA or full)."""

    name: str = "smollm2-135m-instruct"
    """Hub id, local folder, or alias (smollm2-135m-instruct, tiny-random, arith-base)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype. bfloat16 halves memory and is faster on CPUs with avx512_bf16."""
    device: str = "auto"
    """"auto" = cuda when available, else cpu; or a torch device ("cpu", "cuda", "cuda:1")."""
    lora: bool = True
    """LoRA adapters (AMIR-GRPO paper: r 16, alpha 16 on all linear layers); false = full
    fine-tuning (the LENS paper's setting)."""
    lora_r: int = 16
    """LoRA rank r (AMIR-GRPO paper: 16)."""
    lora_alpha: int = 16
    """LoRA alpha; the update is scaled by alpha / r (AMIR-GRPO paper: 16)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA input, in [0, 1) (ours: 0, so that log-probs are deterministic)."""
    lora_target_modules: str | list[str] = "all-linear"
    """Modules that get adapters: "all-linear" (paper), a list of module names ([q_proj,
    v_proj]: peft matches them as name suffixes) or one regular expression over full names."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, about 30 % more compute."""
    seed: int = 0
    """Initialisation seed for randomly initialised aliases (tiny-random)."""


@dataclass
class DataConfig:
    """The training problems and how they are shown to the model."""

    benchmark: str = DEFAULT_BENCHMARK
    """Registered benchmark name (groupwise.data.benchmark_names()); AMIR-GRPO trains on GSM8K
    train."""
    split: str = "train"
    """Split of `benchmark` to train on."""
    data_dir: str | None = None
    """Folder laid out like ../shared/data; default env GROUPWISE_DATA, else the hub."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra loader options, e.g. {level: mid, size: 2000} for the synthetic `arith` task."""
    mix: list[dict[str, Any]] = field(default_factory=list)
    """Several benchmarks as one training set, in place of benchmark/split/options: parts
    {benchmark, split, options, size (problems) or fraction, seed (of the draw)}
    (groupwise.data.MixPart). LENS: [{benchmark: math, split: train}, {benchmark:
    dapo_math_17k, split: train, size: 17500}]."""
    prompt: str = "amir"
    """Prompt template: amir (AMIR-GRPO's calibrated format) | boxed | gsm8k | plain."""
    limit: int | None = None
    """Use only the first N problems (after loading, before shuffling); null = all."""
    shuffle: bool = True
    """Visit problems in a seeded random order, reshuffled every epoch."""
    heldout: dict[str, Any] = field(default_factory=dict)
    """Held-out problems for train.eval_every, as one part of data.mix: {benchmark, split,
    options, size or fraction, seed}, e.g. {benchmark: arith, split: test, options: {level:
    mid, size: 200}}; another split than training's (groupwise.train.heldout)."""


@dataclass
class RolloutConfig:
    """Sampling the completions of a step."""

    group_size: int = 8
    """G: completions sampled per question (AMIR-GRPO paper 8, LENS paper 16)."""
    questions_per_step: int = 1
    """Questions per rollout batch; the batch holds questions_per_step x group_size
    completions (official AMIR code: 4; LENS: 128, in 4 mini-batches)."""
    temperature: float = 1.0
    """Sampling temperature, > 0 (both papers train at 1.0). Log-probs in the loss are taken
    at the same temperature, as TRL does."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1] (both papers: 1.0)."""
    max_new_tokens: int = 256
    """Completion length cap in tokens (AMIR-GRPO code 1024, LENS 4096)."""
    batch_size: int = 64
    """Completions generated per call of the engine (memory, not results)."""
    inference_copy: bool = True
    """Generate from a copy of the policy with the LoRA merged into its weights, in
    rollout.dtype, refreshed after every update: no adapter matmuls per decoded token. Costs one
    more copy of the weights (in rollout.dtype); false = decode through the training model."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype of the inference copy; auto = model.dtype. bfloat16 halves the weight
    traffic of decoding (CPUs with avx512_bf16, GPUs) while training stays in model.dtype."""


@dataclass
class RewardConfig:
    """The reward: a weighted sum of named components (docs/algorithms.md §2 and §3)."""

    weights: dict[str, float] = field(
        default_factory=lambda: {
            "correctness": 1.0,
            "format": 1.0,
            "integer": 1.0,
            "tag_count": 1.0,
            "calibration": 1.0,
        }
    )
    """Component name -> weight; the AMIR-GRPO official code sums these five with weight 1;
    LENS uses {binary: 1.0}."""
    plugins: list[str] = field(default_factory=list)
    """Modules to import before the suite is built; they add components with
    groupwise.rewards.register_component (e.g. ["my_project.rewards"])."""
    correctness_component: str = "correctness"
    """The component that LENS calibrates when combined with AMIR-GRPO (docs/algorithms.md §3)."""
    checking: str = "groupwise"
    """How answers are checked (groupwise.rewards checking modes): groupwise (ours: answer
    block, boxes, `#### N`, then Math-Verify's extraction), amir_official (the AMIR-GRPO official
    correctness: last box, else last number, tolerance 1e-3), math_verify (Math-Verify on the
    whole completion, the LENS paper's verifier). docs/algorithms.md §2 and §3."""
    workers: int = 2
    """Processes for answer checking (math-verify under a hard timeout), >= 1."""
    timeout: float = 5.0
    """Seconds per answer check before it counts as a timeout, > 0."""


@dataclass
class AlgorithmConfig(AlgorithmOptions):
    """Advantages, the clipped surrogate, LENS and AMIR-GRPO (docs/algorithms.md §1-3): the options
    every engine shares (groupwise.algorithms.AlgorithmOptions: advantage, lens_*, amir,
    beta_dpo, margin, pair_mode, max_pairs_per_group, ref_free, lambda_*), and those of
    groupwise's own trainer below."""

    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Std that divides GRPO advantages: group (papers), batch (TRL's option), none
    (Dr.GRPO). docs/algorithms.md §1."""
    advantage_std: Literal["unbiased", "population"] = "unbiased"
    """unbiased (n - 1, as TRL and verl) or population (n) std, for GRPO and LENS's mixed
    groups. docs/algorithms.md §1."""
    advantage_eps: float = 1e-4
    """Added to the std before dividing (ours, as TRL). docs/algorithms.md §1."""
    loss_level: Literal["token", "sequence"] = "token"
    """Where the importance ratio is taken: token (GRPO) or sequence (GSPO: one
    length-normalised ratio per completion). docs/algorithms.md §1."""
    aggregation: Literal["grpo", "dapo", "dr_grpo"] = "grpo"
    """How per-token losses become one number: grpo (token mean per completion, then mean
    over completions: the paper's Eq. 1), dapo (token mean over the batch), dr_grpo (token sum /
    (completions x max_new_tokens)). docs/algorithms.md §1."""
    eps_low: float = 0.2
    """Clip range below: rho >= 1 - eps_low, in (0, 1) (both papers 0.2; GSPO 3e-4)."""
    eps_high: float = 0.2
    """Clip range above: rho <= 1 + eps_high, >= 0 (both papers 0.2; GSPO 4e-4)."""
    kl_coef: float = 0.0
    """gamma, weight of the k3 KL to the reference policy, >= 0 (0 in both papers' code)."""
    minibatches: int = 1
    """PPO mini-batches M: the rollout batch is split into M parts of whole questions, one
    optimizer step each, with advantages, pairs and logp_old taken once from the rollout
    policy (verl's ppo_mini_batch_size; LENS: 4). docs/algorithms.md §1."""
    num_iterations: int = 1
    """Epochs over the rollout batch (TRL's mu): each replays every mini-batch once;
    1 = each row is used once. docs/algorithms.md §1."""


@dataclass
class OptimConfig:
    """AdamW, its schedule and gradient clipping."""

    lr: float = 5e-6
    """Peak learning rate, > 0 (AMIR-GRPO paper 5e-6; LENS 1e-6)."""
    weight_decay: float = 0.1
    """AdamW decoupled weight decay (official AMIR code 0.1; verl's default 0.01)."""
    beta1: float = 0.9
    """AdamW beta1 (official AMIR code 0.9)."""
    beta2: float = 0.99
    """AdamW beta2 (official AMIR code 0.99; verl's default 0.999)."""
    max_grad_norm: float = 0.1
    """Clip the global gradient norm to this, > 0 (official AMIR code 0.1; verl 1.0)."""
    warmup_ratio: float = 0.1
    """Fraction of the optimizer updates with a linear warmup, in [0, 1) (official AMIR 10 %)."""
    schedule: Literal["cosine", "constant", "linear"] = "cosine"
    """Learning-rate decay after warmup (official AMIR code: cosine; verl: constant)."""


@dataclass
class TrainConfig:
    """The run: length, micro-batching, seeds, the run folder and what it keeps."""

    max_steps: int = 1000
    """Rollout batches to train on (official AMIR code 1000; LENS 1,600). Each takes
    minibatches x num_iterations optimizer updates."""
    micro_batch_size: int = 8
    """Completions per forward/backward; rounded to whole groups (at least one group).
    Memory only: the update is the same for any value."""
    seed: int = 0
    """Seed of the question order, the sampling streams and the global RNGs."""
    output_dir: str = "runs/default"
    """The run folder (config, metrics, rollouts, checkpoints, final weights)."""
    save_every: int = 100
    """Checkpoint every N steps (and always at the end)."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept in RUN/checkpoints (older ones are deleted)."""
    tensorboard: bool = False
    """Mirror metrics.jsonl to TensorBoard under RUN/tensorboard."""
    log_rollouts: bool = True
    """Write RUN/rollouts.jsonl: each step's prompts, completions, rewards, advantages, pairs."""
    export_merged: bool = False
    """Also write RUN/final/merged, a full model folder loadable by plain transformers."""
    progress: bool = True
    """Show a progress bar with the live numbers."""
    log_all_wrong_gradient: bool = False
    """Diagnostic of LENS's mechanism (docs/algorithms.md §3): log group_all_wrong_active (fraction
    of the step's groups that are all-wrong and carry a non-zero advantage) and, per update,
    all_wrong_grad_norm (norm of the gradient of the all-wrong rows' part of the loss) and
    all_wrong_grad_share (that norm over the whole update's gradient norm, before clipping).
    Costs one more backward pass per micro-batch holding all-wrong rows with a non-zero
    advantage. Ours."""
    eval_every: int = 0
    """Evaluate the policy on data.heldout before the first step, every N steps and after the
    last: heldout_accuracy in metrics.jsonl, per-problem counts in RUN/heldout.jsonl; 0 = never
    (ours; TRL's eval_strategy="steps" with eval_steps=N). groupwise.train.heldout."""
    eval_samples: int = 4
    """Samples per held-out problem, at rollout.temperature, top_p and max_new_tokens; the
    held-out accuracy is the fraction correct (pass@1, docs/algorithms.md §4)."""


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self) -> Config:
        """Every value in its valid range and the cross-field checks that types alone cannot
        express, before any model or data is loaded; errors name the key and the valid range
        or choices. Imports reward.plugins first: they may register the reward components and
        benchmarks the config names."""
        _check_counts(self)
        _check_ranges(self)
        _check_combinations(self)
        _check_device(self.model.device)
        if self.model.lora:
            _check_target_modules(self.model.lora_target_modules)
        if self.data.prompt not in TEMPLATES:
            raise ConfigError(
                f"data.prompt: invalid value {self.data.prompt!r}; valid choices: "
                + ", ".join(TEMPLATES)
            )
        _import_plugins(self.reward.plugins)
        _check_rewards(self)
        _check_data(self.data)
        _check_heldout(self)
        return self


def _check_counts(c: Config) -> None:
    """Finite numbers, counts >= 1, groups of two or more, whole questions per mini-batch."""
    for key, value in _numbers(c):
        if not math.isfinite(value):
            raise ConfigError(f"{key} must be a finite number, got {value}")
    positive = {
        "rollout.group_size": c.rollout.group_size,
        "rollout.questions_per_step": c.rollout.questions_per_step,
        "rollout.max_new_tokens": c.rollout.max_new_tokens,
        "rollout.batch_size": c.rollout.batch_size,
        "train.max_steps": c.train.max_steps,
        "train.micro_batch_size": c.train.micro_batch_size,
        "train.save_every": c.train.save_every,
        "algorithm.num_iterations": c.algorithm.num_iterations,
        "algorithm.minibatches": c.algorithm.minibatches,
        "reward.workers": c.reward.workers,
        "model.lora_r": c.model.lora_r,
    }
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}")
    if c.rollout.group_size < 2:
        raise ConfigError("rollout.group_size must be >= 2: a group of one has no baseline")
    if c.rollout.questions_per_step % c.algorithm.minibatches:
        raise ConfigError(
            f"rollout.questions_per_step={c.rollout.questions_per_step} must be a multiple "
            f"of algorithm.minibatches={c.algorithm.minibatches}: each mini-batch holds "
            "whole questions"
        )


def _check_combinations(c: Config) -> None:
    """Options that only work together: the inference copy's dtype, a reference policy with
    LoRA, a named run folder."""
    if c.rollout.dtype != "auto" and not c.rollout.inference_copy:
        raise ConfigError(
            f"rollout.dtype={c.rollout.dtype} sets the dtype of the inference copy; "
            "it needs rollout.inference_copy=true (or rollout.dtype=auto)"
        )
    needs_reference = c.algorithm.kl_coef > 0 or (c.algorithm.amir and not c.algorithm.ref_free)
    if needs_reference and not c.model.lora:
        raise ConfigError(
            "a reference policy (algorithm.kl_coef > 0 or algorithm.ref_free=false) needs "
            "model.lora=true: the reference is the same model with the adapter disabled"
        )
    if not c.train.output_dir.strip():
        raise ConfigError("train.output_dir is empty: name the run folder")


def _numbers(config: Config) -> list[tuple[str, float]]:
    """(key, value) of every float option, and of the numbers inside mapping options
    (reward.weights), for the finiteness check."""
    found = []
    for section in dataclasses.fields(config):
        values = getattr(config, section.name)
        for option in dataclasses.fields(values):
            key, value = f"{section.name}.{option.name}", getattr(values, option.name)
            if isinstance(value, float):
                found.append((key, value))
            elif isinstance(value, dict):
                found += [(f"{key}.{k}", v) for k, v in value.items() if isinstance(v, float)]
    return found


def _check_ranges(c: Config) -> None:
    """Single options against their ranges: (key, value, within range, the range in words)."""
    a, o = c.algorithm, c.optim
    rules = [
        (
            "rollout.temperature",
            c.rollout.temperature,
            c.rollout.temperature > 0,
            "> 0 (training scores each completion at the temperature it was sampled with)",
        ),
        ("rollout.top_p", c.rollout.top_p, 0.0 < c.rollout.top_p <= 1.0, "in (0, 1]"),
        ("reward.timeout", c.reward.timeout, c.reward.timeout > 0, "> 0 seconds"),
        (
            "data.limit",
            c.data.limit,
            c.data.limit is None or c.data.limit >= 1,
            ">= 1 (or null: every problem)",
        ),
        ("model.lora_alpha", c.model.lora_alpha, c.model.lora_alpha > 0, "> 0"),
        (
            "model.lora_dropout",
            c.model.lora_dropout,
            0.0 <= c.model.lora_dropout < 1.0,
            "in [0, 1)",
        ),
        ("algorithm.advantage_eps", a.advantage_eps, a.advantage_eps > 0, "> 0"),
        ("algorithm.eps_low", a.eps_low, 0.0 < a.eps_low < 1.0, "in (0, 1)"),
        ("algorithm.eps_high", a.eps_high, a.eps_high >= 0, ">= 0"),
        ("algorithm.kl_coef", a.kl_coef, a.kl_coef >= 0, ">= 0"),
        ("optim.lr", o.lr, o.lr > 0, "> 0"),
        ("optim.max_grad_norm", o.max_grad_norm, o.max_grad_norm > 0, "> 0"),
        ("optim.weight_decay", o.weight_decay, o.weight_decay >= 0, ">= 0"),
        ("optim.beta1", o.beta1, 0.0 <= o.beta1 < 1.0, "in [0, 1)"),
        ("optim.beta2", o.beta2, 0.0 <= o.beta2 < 1.0, "in [0, 1)"),
        ("optim.warmup_ratio", o.warmup_ratio, 0.0 <= o.warmup_ratio < 1.0, "in [0, 1)"),
        (
            "train.keep_checkpoints",
            c.train.keep_checkpoints,
            c.train.keep_checkpoints >= 0,
            ">= 0 (0 keeps every checkpoint)",
        ),
    ]
    for key, value, ok, valid in rules:
        if not ok:
            raise ConfigError(f"{key} must be {valid}, got {value}")
    try:
        a.check(lambda name: f"algorithm.{name}")
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _check_device(device: str) -> None:
    """model.device: "auto", or a torch device this machine has."""
    if device == "auto":
        return
    import torch  # only here: reading a config does not need torch otherwise

    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise ConfigError(
            f"model.device: invalid value {device!r}; valid: auto, cpu, cuda, cuda:N, mps"
        ) from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (parsed.index is not None and parsed.index >= count):
            raise ConfigError(
                f"model.device={device}, but this machine has {count} CUDA device(s); "
                "use model.device=auto or cpu"
            )
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("model.device=mps, but MPS is not available here; use auto or cpu")


def _check_target_modules(target: str | list[str]) -> None:
    """model.lora_target_modules: "all-linear", a non-empty list of module names, or the
    regular expression peft matches against each module's full name (e.g. ".*(q_proj|v_proj)")."""
    if isinstance(target, list):
        if not target or not all(name.strip() for name in target):
            raise ConfigError(
                f"model.lora_target_modules: {target!r} must name at least one module, with "
                "no empty name"
            )
        return
    try:
        re.compile(target)
    except re.error as error:
        raise ConfigError(
            f"model.lora_target_modules: {target!r} is not a regular expression ({error})"
        ) from None
    if not target.strip():
        raise ConfigError(
            "model.lora_target_modules is empty: give all-linear, a list of module names, or a "
            "regular expression matching the full names of the modules to adapt "
            "(e.g. '.*(q_proj|v_proj)')"
        )


def _import_plugins(modules: list[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigError(f"reward.plugins: cannot import {module!r} ({error})") from None


def _check_rewards(c: Config) -> None:
    try:
        checking_mode(c.reward.checking)
    except ValueError as error:
        raise ConfigError(f"reward.checking: {error}") from None
    if not c.reward.weights:
        raise ConfigError("reward.weights is empty: name at least one reward component")
    known = component_names()
    for name in c.reward.weights:
        if name not in known:
            raise ConfigError(
                f"reward.weights: unknown component {name!r}; valid components: "
                f"{', '.join(known)} (more come from reward.plugins)"
            )
    component = c.reward.correctness_component
    if c.algorithm.advantage == "lens":
        if component not in c.reward.weights:
            raise ConfigError(
                f"algorithm.advantage=lens calibrates reward component '{component}' "
                f"(reward.correctness_component), which is not in reward.weights "
                f"{sorted(c.reward.weights)}"
            )
        try:
            correct_value(component)
        except ValueError as error:
            raise ConfigError(f"reward.correctness_component: {error}") from None
    if c.algorithm.amir:
        _check_margin(c)


def _check_margin(c: Config) -> None:
    """Refuse an AMIR margin that no two completions' rewards can exceed (issue: an AMIR term
    silently absent); the components' declared bounds make it knowable (docs/algorithms.md §2)."""
    weights = c.reward.weights
    components = [get_component(name) for name in weights]
    component = c.reward.correctness_component
    value = get_component(component).correct_value if component in weights else None
    problem = unreachable_margin(
        c.algorithm.margin,
        get_advantage_estimator(c.algorithm.advantage),
        [part.bounds for part in components],
        [weights[part.name] for part in components],
        weights[component] * value if value is not None else 0.0,
        c.rollout.group_size,
        option="algorithm.margin",
    )
    if problem is not None:
        raise ConfigError(problem)


def _check_data(d: DataConfig) -> None:
    """data.benchmark, data.split and data.options against the benchmark's loader, or each part
    of data.mix (which then replaces them)."""
    if d.mix:
        if (d.benchmark, d.split, d.options) != (DEFAULT_BENCHMARK, "train", {}):
            raise ConfigError(
                "data.mix replaces data.benchmark, data.split and data.options: give the "
                "benchmark, split and options in each part of data.mix"
            )
        for number, part in enumerate(d.mix):
            where = f"data.mix[{number}]"
            try:
                part = MixPart.from_dict(part, where)
            except ValueError as error:
                raise ConfigError(str(error)) from None
            _check_benchmark(part.benchmark, part.split, part.options, f"{where}.")
        return
    _check_benchmark(d.benchmark, d.split, d.options, "data.")


def _check_heldout(c: Config) -> None:
    """train.eval_every, train.eval_samples and data.heldout (groupwise.train.heldout)."""
    t = c.train
    if t.eval_every < 0 or t.eval_samples < 1:
        raise ConfigError(
            "train.eval_every must be >= 0 (0: no held-out evaluation) and train.eval_samples "
            f">= 1, got {t.eval_every} and {t.eval_samples}"
        )
    if not c.data.heldout:
        if t.eval_every:
            raise ConfigError(
                f"train.eval_every={t.eval_every} needs data.heldout: the held-out problems, "
                "e.g. {benchmark: arith, split: test, options: {level: mid, size: 200}}"
            )
        return
    try:
        part = MixPart.from_dict(c.data.heldout, "data.heldout")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    _check_benchmark(part.benchmark, part.split, part.options, "data.heldout.")
    trained = [(m.get("benchmark"), m.get("split")) for m in c.data.mix] or [
        (c.data.benchmark, c.data.split)
    ]
    if (part.benchmark, part.split) in trained:
        raise ConfigError(
            f"data.heldout: {part.label} is a split the run trains on; held-out problems come "
            "from another split (e.g. split: test)"
        )


def _check_benchmark(name: str, split: str | None, options: Any, prefix: str) -> None:
    try:
        splits = benchmark_splits(name)
    except ValueError as error:
        raise ConfigError(f"{prefix}benchmark: {error}") from None
    if split is not None and split not in splits:
        raise ConfigError(
            f"{prefix}split: benchmark {name!r} has no split {split!r}; valid splits: "
            + ", ".join(splits)
        )
    valid = benchmark_options(name)
    for option in options if valid is not None else ():
        if option not in valid:
            listed = ", ".join(valid) if valid else "none (this benchmark takes no options)"
            raise ConfigError(
                f"{prefix}options: unknown option {option!r} for benchmark {name!r}; "
                f"valid options: {listed}"
            )


# ---------------------------------------------------------------------------------------------
# Loading and saving (the typed-config machinery is groupwise.config)


def config_from_dict(data: dict[str, Any]) -> Config:
    """Builds and validates a Config from a nested mapping (as read from YAML)."""
    return build(Config, data).validate()


def config_to_dict(config: Config) -> dict[str, Any]:
    return dataclasses.asdict(config)


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Reads a YAML preset (or the defaults when path is None), applies `a.b=value` overrides
    and validates. Errors name the file and the offending key."""
    data = read_yaml(path, "sections (model:, data:, rollout:, ...)") if path is not None else {}
    for override in overrides:
        apply_override(data, override)
    try:
        return config_from_dict(data)
    except ConfigError as err:
        where = f"{path}: " if path is not None else ""
        raise ConfigError(f"{where}{err}") from None


def save_config(config: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
