"""Training configuration: the sections of `groupwise train`'s config, declarations only.

Every option is declared here once (`groupwise.options.option`) with its default, where it comes
from (paper, official code, or ours; see docs/algorithms.md) and its valid range; the algorithm
options every engine shares come from groupwise.algorithms.AlgorithmOptions. The config's
other rooms (docs/design.md, "Layout (the rooms)"): reading YAML, overrides and type checks are
groupwise.config, loading and saving a file train.config_file, the ranges and the rules between
options train.config_checks, what depends on the machine or the plugins train.preflight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from groupwise.algorithms import AlgorithmOptions, LossSettings
from groupwise.options import Rule, option
from groupwise.train.report_to import PACKAGES

DEFAULT_BENCHMARK = "gsm8k"


@dataclass
class ModelConfig:
    """The policy: which model, in what precision, trained how (LoRA or full)."""

    name: str = option(
        "smollm2-135m-instruct",
        """Hub id, local folder, or alias (smollm2-135m-instruct, tiny-random, arith-base).""",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = option(
        "float32",
        """Weights dtype. bfloat16 halves memory and is faster on CPUs with avx512_bf16.""",
    )
    device: str = option(
        "auto",
        """auto = cuda when available, else cpu; or a torch device ("cpu", "cuda", "cuda:1").""",
    )
    lora: bool = option(
        True,
        """LoRA adapters (AMIR-GRPO paper: r 16, alpha 16 on all linear layers); false = full
        fine-tuning (the LENS paper's setting).""",
    )
    lora_r: int = option(
        16,
        """LoRA rank r (AMIR-GRPO paper: 16).""",
        ge=1,
    )
    lora_alpha: int = option(
        16,
        """LoRA alpha; the update is scaled by alpha / r (AMIR-GRPO paper: 16).""",
        gt=0,
    )
    lora_dropout: float = option(
        0.0,
        """Dropout on the LoRA input, in [0, 1) (ours: 0, so that log-probs are deterministic).""",
        ge=0,
        lt=1,
    )
    lora_target_modules: str | list[str] = option(
        "all-linear",
        """Modules that get adapters: "all-linear" (paper), a list of module names ([q_proj,
        v_proj]: peft matches them as name suffixes) or one regular expression over full
        names.""",
    )
    gradient_checkpointing: bool = option(
        False,
        """Recompute activations in the backward pass: less memory, about 30 % more compute.""",
    )
    attention: Literal["sdpa", "eager"] | None = option(
        None,
        """The policy's attention kernel (transformers' attn_implementation): null = the model's
        own (sdpa); eager = plain matmuls, faster for the short rows of a CPU run in bfloat16
        (the SmolLM2 preset: 11 % more completion tokens a second). docs/guides/train.md,
        "Mixed precision".""",
    )
    seed: int = option(
        0,
        """Initialisation seed for randomly initialised aliases (tiny-random).""",
    )


@dataclass
class DataConfig:
    """The training problems and how they are shown to the model."""

    benchmark: str = option(
        DEFAULT_BENCHMARK,
        """Registered benchmark name (groupwise.data.benchmark_names()); AMIR-GRPO trains on
        GSM8K train.""",
    )
    split: str = option(
        "train",
        """Split of `benchmark` to train on.""",
    )
    data_dir: str | None = option(
        None,
        """Benchmark folder laid out like ../shared/data. Default: env GROUPWISE_DATA, else a
        shared/data folder beside the working folder (../shared/data) or beside groupwise's
        checkout, else the public hub copies (GROUPWISE_DATA=hub: always them).""",
    )
    options: dict[str, Any] = option(
        doc="""Extra loader options, e.g. {level: mid, size: 2000} for the synthetic `arith`
        task.""",
        factory=dict,
    )
    mix: list[dict[str, Any]] = option(
        doc="""Several benchmarks as one training set, in place of benchmark/split/options: parts
        {benchmark, split, options, size (problems) or fraction, seed (of the draw)}
        (groupwise.data.MixPart). LENS: [{benchmark: math, split: train}, {benchmark:
        dapo_math_17k, split: train, size: 17500}].""",
        factory=list,
    )
    prompt: str = option(
        "amir",
        """Prompt template: amir (AMIR-GRPO's calibrated format) | boxed | brief | gsm8k |
        plain (groupwise.data.prompts).""",
    )
    limit: int | None = option(
        None,
        """Use only the first N problems (after loading, before shuffling); null = all.""",
        ge=1,
        allow_none=True,
        note="(or null: every problem)",
    )
    shuffle: bool = option(
        True,
        """Visit problems in a seeded random order, reshuffled every epoch.""",
    )
    heldout: dict[str, Any] = option(
        doc="""Held-out problems for train.eval_every, as one part of data.mix: {benchmark, split,
        options, size or fraction, seed}, e.g. {benchmark: arith, split: test, options:
        {level: mid, size: 200}}; another split than training's (groupwise.train.heldout).""",
        factory=dict,
    )


@dataclass
class RolloutConfig:
    """Sampling the completions of a step."""

    group_size: int = option(
        8,
        """G: completions sampled per question (AMIR-GRPO paper 8, LENS paper 16).""",
        ge=2,
        note="(a group of one has no baseline)",
    )
    questions_per_step: int = option(
        1,
        """Questions per rollout batch; the batch holds questions_per_step x group_size
        completions (official AMIR code: 4; LENS: 128, in 4 mini-batches).""",
        ge=1,
    )
    temperature: float = option(
        1.0,
        """Sampling temperature, > 0 (both papers train at 1.0). Log-probs in the loss are taken
        at the same temperature, as TRL does.""",
        gt=0,
        note="(training scores each completion at the temperature it was sampled with)",
    )
    top_p: float = option(
        1.0,
        """Nucleus sampling mass in (0, 1] (both papers: 1.0).""",
        gt=0,
        le=1,
    )
    max_new_tokens: int = option(
        256,
        """Completion length cap in tokens (AMIR-GRPO code 1024, LENS 4096).""",
        ge=1,
    )
    batch_size: int = option(
        64,
        """Completions generated per call of the engine (memory, not results).""",
        ge=1,
    )
    inference_copy: bool = option(
        True,
        """Generate from a copy of the policy with the LoRA merged into its weights, in
        rollout.dtype, refreshed after every update: no adapter matmuls per decoded token.
        Costs one more copy of the weights (in rollout.dtype); false = decode through the
        training model.""",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16", "precision"] = option(
        "auto",
        """Weights dtype of the sampler (the inference copy, or vLLM's); auto = model.dtype.
        bfloat16 halves the weight traffic of decoding (CPUs with AMX or avx512_bf16, GPUs)
        while training stays in model.dtype; precision = bfloat16 where train.precision
        resolves to bfloat16, else auto (resolved when the run starts; config.yaml records
        it).""",
    )
    engine: Literal["transformers", "vllm", "auto"] = option(
        "transformers",
        """What samples the completions: transformers (groupwise's own decoding loop), vllm (an
        engine in the training process, its weights synced after every update that changed
        them; needs vLLM: docs/guides/train.md, "Rollout engine") or auto (vllm where vLLM is
        installed and the run is one process, else transformers; the run's config.yaml records
        the choice). The loss always uses the trainer's own log-probs.""",
    )
    staleness: int = option(
        0,
        """How many updates the sampler may run ahead of learning: 0 (sample, then learn) | 1
        (vllm only: the next step's batch is sampled, with the weights before this step's
        update, while this step learns; logp_old is the trainer's own, and
        rollout.importance_correction corrects for the update between; one process, no dynamic
        sampling). docs/guides/train.md, "Sampling ahead of learning".""",
        ge=0,
        le=1,
    )
    importance_correction: bool = option(
        False,
        """vllm only: weight each token's policy loss by the rollout correction of the ratio
        pi_old / pi_sampler between the trainer's rollout-policy log-prob and the sampler's,
        in rollout.importance_mode (as TRL's vllm_importance_sampling_correction).
        docs/algorithms.md, "Rollout correction".""",
    )
    importance_mode: Literal[
        "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"
    ] = option(
        "token_truncate",
        """The rollout correction (TRL's vllm_importance_sampling_mode): token_truncate (each
        token's ratio clamped to [importance_floor, importance_cap]: TIS) | token_mask (a
        token's ratio outside them becomes 0: masked IS) | sequence_truncate (the product of a
        sequence's token ratios, clamped, on all its tokens) | sequence_mask (a sequence whose
        product is outside them leaves the loss).""",
    )
    importance_cap: float = option(
        3.0,
        """The rollout correction's upper bound on the ratio (TRL's
        vllm_importance_sampling_clip_max, 3.0).""",
        ge=1,
    )
    importance_floor: float = option(
        0.0,
        """The rollout correction's lower bound on the ratio (TRL's
        vllm_importance_sampling_clip_min; 0: none).""",
        ge=0,
        le=1,
    )
    logp_old: Literal["recompute", "sampler"] = option(
        "recompute",
        """Where logp_old, the rollout policy's per-token log-probs, comes from (LENS's
        confidences, AMIR's l_old, the ratio of mini-batches 2..M): recompute (the trainer's own
        pass over the completions; where the targets need every row's before the first update,
        a no-grad pass) | sampler (the vllm engine's log-probs of the tokens it drew, from the
        weights being trained: no such pass; needs rollout.engine=vllm, top_p 1, no importance
        correction). The trainer's and the sampler's log-probs are compared either way
        (sampling_logp_difference). docs/algorithms.md, "Where logp_old comes from".""",
    )
    vllm_memory: float = option(
        0.3,
        """vllm only: the share of the accelerator's memory vLLM takes for weights and KV cache
        (its gpu_memory_utilization; on a CPU, VLLM_CPU_KVCACHE_SPACE GiB sizes the cache).""",
        gt=0,
        lt=1,
    )
    dynamic_sampling: bool = option(
        False,
        """DAPO's dynamic sampling (verl's algorithm.filter_groups.enable): drop the groups whose
        rollout.filter_metric is constant and draw questions_per_step more questions until the
        step has questions_per_step groups or rollout.max_draws draws were made (then the
        step is filled with dropped groups, in draw order). Logs draws, completions_sampled and
        the groups kept and dropped. docs/algorithms.md, "Dynamic sampling".""",
    )
    filter_metric: Literal["correct", "reward", "shaped"] = option(
        "correct",
        """What dynamic sampling reads (verl's filter_groups.metric): correct (binary
        correctness, as verl's acc: drops all-correct and all-wrong groups), reward (the
        weighted reward total, as verl's score), shaped (advantage=lens only: the LENS-shaped
        rewards, which are constant only in the groups LENS gives zero advantages: all-correct
        ones, and all-wrong ones under lens_mode=mixed_only). docs/algorithms.md, "Dynamic
        sampling".""",
    )
    max_draws: int = option(
        10,
        """Dynamic sampling: at most this many draws of questions_per_step questions per step
        (DAPO's recipe 10); then the step trains on dropped groups in the places left, where
        verl's trainers keep drawing or stop (docs/algorithms.md, "Dynamic sampling").""",
        ge=1,
    )
    vllm_enforce_eager: bool | None = option(
        None,
        """vllm only: vLLM's enforce_eager. null: vLLM's way here (eager on a CPU, where groupwise
        sets it; compiled with CUDA graphs on a GPU); false compiles on a CPU too: faster
        sampling after a longer start (2 cores, SmolLM2, 16 x 128 tokens: 430-480 against
        320-360 tokens/s, 79 s against 9 s to build; bench/results/vllm_vs_trl.md).""",
    )


@dataclass
class RewardConfig:
    """The reward: a weighted sum of named components (docs/algorithms.md §2 and §3)."""

    weights: dict[str, float] = option(
        doc="""Component name -> weight; the default is groupwise's lenient variant of the AMIR-GRPO
        reward, the official one is groupwise.rewards.AMIR_GRPO_WEIGHTS (six components, weight
        1); LENS uses {binary: 1.0}.""",
        factory=lambda: {
            "correctness": 1.0,
            "format": 1.0,
            "integer": 1.0,
            "tag_count": 1.0,
            "calibration": 1.0,
        },
    )
    plugins: list[str] = option(
        doc="""Modules to import before the suite is built; they add components with
        groupwise.rewards.register_component (e.g. ["my_project.rewards"]).""",
        factory=list,
    )
    correctness_component: str = option(
        "correctness",
        """The component that LENS calibrates when combined with AMIR-GRPO
        (docs/algorithms.md §3).""",
    )
    checking: str = option(
        "groupwise",
        """How answers are checked (groupwise.rewards checking modes): groupwise (ours: answer
        block, boxes, `#### N`, then Math-Verify's extraction), amir_official (the AMIR-GRPO
        official correctness: last box, else last number, tolerance 1e-3), math_verify
        (Math-Verify on the whole completion, the LENS paper's verifier). docs/algorithms.md §2 and
        §3.""",
    )
    overlong_buffer: int = option(
        0,
        """DAPO's soft overlong punishment (Eq. 13; TRL's soft_punish_cache, verl's
        overlong_buffer.len): a reward column "overlong" that falls linearly from 0 to -1 over
        the last N tokens before rollout.max_new_tokens, weighted by reward.overlong_penalty;
        0 = off. docs/algorithms.md, "Overlong completions".""",
        ge=0,
        note="(0: off)",
    )
    overlong_penalty: float = option(
        1.0,
        """The weight of the overlong column: the penalty at the length limit (verl's
        overlong_buffer.penalty_factor, 1.0).""",
        ge=0,
    )
    workers: int = option(
        2,
        """Processes for answer checking (math-verify under a hard timeout), >= 1.""",
        ge=1,
    )
    timeout: float = option(
        5.0,
        """Seconds per answer check before it counts as a timeout, > 0.""",
        gt=0,
        note="seconds",
    )


@dataclass
class AlgorithmConfig(AlgorithmOptions):
    """Advantages, the clipped surrogate, LENS and AMIR-GRPO (docs/algorithms.md §1-3): the options
    every engine shares (groupwise.algorithms.AlgorithmOptions: advantage, lens_*, amir,
    beta_dpo, margin, pair_mode, max_pairs_per_group, ref_free, lambda_*), and those of
    groupwise's own trainer below."""

    scale_rewards: Literal["group", "batch", "none"] = option(
        "group",
        """Std that divides GRPO advantages: group (papers), batch (TRL's option), none
        (Dr.GRPO). docs/algorithms.md §1.""",
    )
    advantage_std: Literal["unbiased", "population"] = option(
        "unbiased",
        """unbiased (n - 1, as TRL and verl) or population (n) std, for GRPO and LENS's mixed
        groups. docs/algorithms.md §1.""",
    )
    advantage_eps: float = option(
        1e-4,
        """Added to the std before dividing (ours, as TRL). docs/algorithms.md §1.""",
        gt=0,
    )
    loss_level: Literal["token", "sequence"] = option(
        "token",
        """Where the importance ratio is taken: token (GRPO) or sequence (GSPO: one
        length-normalised ratio per completion). docs/algorithms.md §1.""",
    )
    aggregation: Literal["grpo", "dapo", "dr_grpo"] = option(
        "grpo",
        """How per-token losses become one number: grpo (token mean per completion, then mean
        over completions: the paper's Eq. 1), dapo (token mean over the batch), dr_grpo (token
        sum / (completions x max_new_tokens)). docs/algorithms.md §1.""",
    )
    eps_low: float = option(
        0.2,
        """Clip range below: rho >= 1 - eps_low, in (0, 1) (both papers 0.2; GSPO 3e-4).""",
        gt=0,
        lt=1,
    )
    eps_high: float = option(
        0.2,
        """Clip range above: rho <= 1 + eps_high, >= 0 (both papers 0.2; GSPO 4e-4).""",
        ge=0,
    )
    kl_coef: float = option(
        0.0,
        """gamma, weight of the k3 KL to the reference policy, >= 0 (0 in both papers' code).""",
        ge=0,
    )
    minibatches: int = option(
        1,
        """PPO mini-batches M: the rollout batch is split into M parts of whole questions, one
        optimizer step each, with advantages, pairs and logp_old taken once from the rollout
        policy (verl's ppo_mini_batch_size; LENS: 4). docs/algorithms.md §1.""",
        ge=1,
    )
    num_iterations: int = option(
        1,
        """Epochs over the rollout batch (TRL's mu): each replays every mini-batch once; 1 = each
        row is used once. docs/algorithms.md §1.""",
        ge=1,
    )

    mask_truncated: bool = option(
        False,
        """DAPO's overlong filtering (TRL's mask_truncated_completions): completions cut at
        rollout.max_new_tokens leave the loss; they still count in their group's statistics
        (advantages, LENS's difficulty), and AMIR forms no pair with them.
        docs/algorithms.md, "Overlong completions".""",
    )

    def loss_settings(self, max_completion_length: int) -> LossSettings:
        """The per-row loss terms' settings (groupwise.algorithms.loss_terms)."""
        return LossSettings(
            eps_low=self.eps_low,
            eps_high=self.eps_high,
            ratio_level=self.loss_level,
            aggregation=self.aggregation,
            kl_coef=self.kl_coef,
            max_completion_length=max_completion_length,
        )


@dataclass
class OptimConfig:
    """The optimizer (AdamW, or plain SGD for checks), its schedule and gradient clipping."""

    optimizer: Literal["adamw", "sgd"] = option(
        "adamw",
        """adamw (both papers), or sgd: plain gradient descent without momentum, so that an
        update is the learning rate times the clipped gradient (a change computed by hand, as
        the multi-process test does); beta1 and beta2 do not apply to it, weight_decay is added
        to the gradient as torch.optim.SGD does.""",
    )
    lr: float = option(
        5e-6,
        """Peak learning rate, > 0 (AMIR-GRPO paper 5e-6; LENS 1e-6).""",
        gt=0,
    )
    weight_decay: float = option(
        0.1,
        """AdamW decoupled weight decay (official AMIR code 0.1; verl's default 0.01).""",
        ge=0,
    )
    beta1: float = option(
        0.9,
        """AdamW beta1 (official AMIR code 0.9).""",
        ge=0,
        lt=1,
    )
    beta2: float = option(
        0.99,
        """AdamW beta2 (official AMIR code 0.99; verl's default 0.999).""",
        ge=0,
        lt=1,
    )
    max_grad_norm: float = option(
        0.1,
        """Clip the global gradient norm to this, > 0 (official AMIR code 0.1; verl 1.0).""",
        gt=0,
    )
    warmup_ratio: float = option(
        0.1,
        """Fraction of the optimizer updates with a linear warmup, in [0, 1) (official AMIR 10
        %).""",
        ge=0,
        lt=1,
    )
    schedule: Literal["cosine", "constant", "linear"] = option(
        "cosine",
        """Learning-rate decay after warmup (official AMIR code: cosine; verl: constant).""",
    )


@dataclass
class TrainConfig:
    """The run: length, micro-batching, seeds, the run folder and what it keeps."""

    max_steps: int = option(
        1000,
        """Rollout batches to train on (official AMIR code 1000; LENS 1,600). Each takes
        minibatches x num_iterations optimizer updates.""",
        ge=1,
    )
    micro_batch_size: int = option(
        8,
        """Completions per forward/backward; rounded to whole groups (at least one group). Memory
        only: the update is the same for any value.""",
        ge=1,
    )
    precision: Literal["float32", "bfloat16", "auto"] = option(
        "float32",
        """The training passes' precision: float32 | bfloat16 (torch.autocast: the matmuls in
        bfloat16, on CPUs with AMX or avx512_bf16 and on GPUs; the weights, LoRA adapters and
        optimizer state stay in model.dtype, which must be float32, and the log-softmax of the
        sampled tokens and the loss reductions in float32) | auto (bfloat16 where the device
        multiplies it in hardware and model.dtype is float32, else float32; resolved when the
        run starts, config.yaml records it). docs/guides/train.md, "Mixed precision".""",
    )
    seed: int = option(
        0,
        """Seed of the question order, the sampling streams and the global RNGs.""",
    )
    output_dir: str = option(
        "runs/default",
        """The run folder (config, metrics, rollouts, checkpoints, final weights).""",
    )
    save_every: int = option(
        100,
        """Checkpoint every N steps (and always at the end).""",
        ge=1,
    )
    keep_checkpoints: int = option(
        2,
        """Newest checkpoints kept in RUN/checkpoints (older ones are deleted).""",
        ge=0,
        note="(0 keeps every checkpoint)",
    )
    tensorboard: bool = option(
        False,
        """Mirror metrics.jsonl to TensorBoard under RUN/tensorboard.""",
    )
    report_to: list[str] = option(
        doc="""Loggers that mirror every metrics.jsonl number at its step, rank 0 only: any of
        tensorboard, wandb, trackio, mlflow (the names of HF's Trainer and TRL's report_to);
        [] = none. Each package must be installed (pip install 'groupwise[report]').
        docs/guides/train.md, "Where the metrics go".""",
        rule=Rule("a list of: " + ", ".join(PACKAGES), lambda v: all(n in PACKAGES for n in v)),
        factory=list,
    )
    log_rollouts: bool = option(
        True,
        """Write RUN/rollouts.jsonl: each step's prompts, completions, rewards, advantages,
        pairs.""",
    )
    export_merged: bool = option(
        False,
        """Also write RUN/final/merged, a full model folder loadable by plain transformers.""",
    )
    progress: bool = option(
        True,
        """Show a progress bar with the live numbers.""",
    )
    log_all_wrong_gradient: bool = option(
        False,
        """Diagnostic of LENS's mechanism (docs/algorithms.md §3): log group_all_wrong_active
        (fraction of the step's groups that are all-wrong and carry a non-zero advantage) and, per
        update, all_wrong_grad_norm (norm of the gradient of the all-wrong rows' part of the
        loss) and all_wrong_grad_share (that norm over the whole update's gradient norm,
        before clipping). Costs one more backward pass per micro-batch holding all-wrong rows
        with a non-zero advantage. Ours.""",
    )
    max_completions: int = option(
        0,
        """Stop after the step at which the completions sampled (every draw's, dynamic sampling
        included) reach N; 0 = no such limit. A budget in samples rather than steps; the
        learning-rate schedule still spans train.max_steps (ours).""",
        ge=0,
        note="(0: no limit)",
    )
    eval_every: int = option(
        0,
        """Evaluate the policy on data.heldout before the first step, every N steps and after the
        last: heldout_accuracy, heldout_pass@k and (a prompt asking for a confidence) the
        calibration in metrics.jsonl, per-problem counts and the tables in RUN/heldout.jsonl;
        0 = never (ours; TRL's eval_strategy="steps" with eval_steps=N).
        groupwise.train.heldout.""",
        ge=0,
        note="(0: no held-out evaluation)",
    )
    eval_samples: int = option(
        4,
        """Samples per held-out problem, at rollout.temperature, top_p and max_new_tokens; the
        held-out accuracy is the fraction correct (pass@1, docs/algorithms.md §4).""",
        ge=1,
    )


@dataclass
class Config:
    """A run's configuration: one section per YAML mapping (model:, data:, rollout:, reward:,
    algorithm:, optim:, train:)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
