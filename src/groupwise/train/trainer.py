"""The training loop for GRPO, AMIR-GRPO, LENS and GSPO (and AMIR-GRPO + LENS).

One step, top to bottom (`Trainer.train_step`):

    questions -> rollout -> score (reward columns) -> advantages + AMIR pairs (whole batch)
              -> for each epoch, for each mini-batch: one update (`Trainer._update`):
                 micro-batches of  share * (policy + gamma * KL) + lambda * preference
                 -> backward -> all-reduce -> clip -> AdamW step

Every algorithm decision is a call into groupwise.algorithms (DESIGN.md): the advantage
estimator looked up by name, AMIR's pairs and per-completion coefficients, the loss terms of a
micro-batch and the adaptive lambda. This file is plumbing around them.

Rollout-policy log-probs (logp_old; LENS's confidences and AMIR's l_old are their means): a row's
are taken from its first forward pass under the rollout policy. While no optimizer step has
been taken in this step, that is the training forward pass itself (no extra pass: the first
update is exactly on-policy, ratio 1). Rows whose values are needed before that, or after the
policy has moved, get them from one no-grad pass right after the rollout: the rows of
mini-batches 2..M (REFERENCE.md 1, PPO mini-batches), and every row when the estimator needs
them over the whole batch before the first update. That is LENS with AMIR-GRPO (the update's
pair count, which normalises L_pref, depends on LENS's rewards) or with several mini-batches;
LENS alone with one mini-batch computes each micro-batch's advantages from that micro-batch's
own training pass (its groups are whole and LENS is per group), so it costs no pass.

Micro-batches hold whole groups and every share is taken of the update's GLOBAL batch
(completions, tokens, pairs), so summing micro-batches and processes (one all-reduce before
clipping) gives the gradient of the whole update. Each group's prompt runs through the model
once, its key/value cache shared by the group's completions (groupwise.scoring); generation runs
on a merged (optionally bfloat16) inference copy of the policy (groupwise.rollout).

Several processes (torchrun / accelerate launch; groupwise.train.distributed): each takes its own
whole questions of every mini-batch; rewards, advantages and pairs are computed over the
gathered batch in question order, the k-th micro-batches of all processes feed AdaptiveLambda
together, so lambda is the same everywhere. Rank 0 writes the logs, checkpoints and final model.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from groupwise.algorithms import (
    AdaptiveLambda,
    Advantages,
    AdvantageSettings,
    GroupRewards,
    LossSettings,
    LossTerms,
    PreferenceTerms,
    get_advantage_estimator,
    group_types,
    loss_terms,
    micro_batch_share,
    mine_pairs,
    preference_coefficients,
    sequence_mean_logp,
)
from groupwise.data import MixPart, load_benchmark, load_mix, render_prompt
from groupwise.errors import NonFiniteError, check_finite
from groupwise.models import (
    DTYPES,
    LoraSettings,
    attach_lora,
    load_model,
    reference_policy,
    save_merged,
)
from groupwise.rewards import RewardSuite, Scores, correct_value
from groupwise.rollout import Rollouts, SamplingParams, TransformersGenerator
from groupwise.scoring import completion_logprobs
from groupwise.train.checkpoint import (
    find_resume_point,
    load_trainer_state,
    load_weights_into,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from groupwise.train.config import AlgorithmConfig, Config
from groupwise.train.distributed import Distributed
from groupwise.train.heldout import HeldoutEvaluation
from groupwise.train.metrics_log import JsonlLog, MetricsLog
from groupwise.train.progress import ProgressLine, all_wrong_with_gradient
from groupwise.train.run_folder import RunFolder
from groupwise.train.sampler import ProblemSampler


@dataclass
class StepBatch:
    """One step's rollouts with what is computed from them before the updates.

    rollouts: this process's b completions. rows: [b] their rows in the whole batch, which holds
    every process's B completions in question order. scores: the whole batch's rewards.
    advantages: [B]. rewards: [B] the totals advantages and pairs were computed from
    (LENS-calibrated under LENS). chosen, rejected: [P] AMIR pairs (rows of the whole batch).
    """

    rollouts: Rollouts
    rows: torch.Tensor
    scores: Scores
    texts: list[str]
    truncated: torch.Tensor
    advantages: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    rewards: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    chosen: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    rejected: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))


@dataclass
class LossInputs:
    """The per-row inputs of one micro-batch's loss terms (`groupwise.algorithms.loss_terms`):
    logp / old_logp / ref_logp [b, T] per-token log-probs (policy with gradient, rollout policy
    when off-policy, reference), mask [b, T] bool, advantages [b]."""

    logp: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None

    def terms(self, settings: LossSettings, coefficients: torch.Tensor | None = None) -> LossTerms:
        return loss_terms(
            self.logp,
            self.mask,
            self.advantages,
            settings,
            old_logp=self.old_logp,
            ref_logp=self.ref_logp,
            coefficients=coefficients,
        )

    def rows(self, keep: torch.Tensor) -> LossInputs:
        """The inputs of the rows where `keep` ([b] bool) is set."""
        return LossInputs(
            *(t[keep] for t in (self.logp, self.mask, self.advantages)),
            *(None if t is None else t[keep] for t in (self.old_logp, self.ref_logp)),
        )


class RolloutLogprobs:
    """Per-token log-probs of this process's rows under the rollout policy, [b, T] (detached).

    A row's values are recorded once, by the no-grad pass after the rollout or by the first
    training forward pass that sees it while the policy is still the rollout policy.
    """

    def __init__(self, rows: int, length: int) -> None:
        self.values = torch.zeros(rows, length)
        self.recorded = torch.zeros(rows, dtype=torch.bool)

    def record(self, rows: slice, logp: torch.Tensor) -> None:
        """Keep logp [rows, T] for the rows not recorded yet."""
        new = ~self.recorded[rows]
        self.values[rows][new] = logp.detach().to(self.values)[new.to(logp.device)].cpu()
        self.recorded[rows] = True

    def of(self, rows: slice) -> torch.Tensor:
        """[rows, T]; every row must have been recorded."""
        if not bool(self.recorded[rows].all()):
            raise RuntimeError("rollout-policy log-probs of these rows were never recorded")
        return self.values[rows]


class MetricSums:
    """Sums of per-micro-batch numbers, each already a share of a global count."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}

    def add(self, **values: float) -> None:
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + float(value)

    def total(self, dist: Distributed) -> dict[str, float]:
        """The sums over every process (the same keys in the same order everywhere)."""
        keys = sorted(self.sums)
        return dict(zip(keys, dist.sum([self.sums[k] for k in keys]), strict=True))


class Trainer:
    """Owns the model, optimizer, schedule, AdaptiveLambda and the run folder."""

    def __init__(self, config: Config, resume: bool = False, folder: RunFolder | None = None):
        """Builds everything a run needs; rank 0 first opens (locks) the run folder, unless the
        caller opened it: `groupwise train` does, before any model or data is loaded."""
        self.config = config
        cfg = config
        self.dist = Distributed()
        parts = self.dist.world_size * cfg.algorithm.minibatches
        if cfg.rollout.questions_per_step % parts:
            raise ValueError(
                f"rollout.questions_per_step={cfg.rollout.questions_per_step} must be divisible "
                f"by the number of processes ({self.dist.world_size}) x algorithm.minibatches "
                f"({cfg.algorithm.minibatches}): each process takes whole questions of each "
                "mini-batch"
            )
        self.run_dir = Path(cfg.train.output_dir)
        self.folder = folder
        self._owns_folder = folder is None and self.dist.is_main
        if self._owns_folder:
            self.folder = RunFolder.open(self.run_dir, cfg, "resume" if resume else "fresh")
        try:
            self._build(resume)
        except BaseException:
            self.close()  # a failed start must not keep the folder locked
            raise

    def _build(self, resume: bool) -> None:
        """Data, model, generator, rewards, optimizer, schedule, algorithm, logs; then resume."""
        cfg = self.config
        torch.manual_seed(cfg.train.seed)
        # Data before the model: a bad file or loader option fails before minutes of loading.
        problems = (
            load_mix([MixPart.from_dict(part) for part in cfg.data.mix], cfg.data.data_dir)
            if cfg.data.mix
            else load_benchmark(
                cfg.data.benchmark, cfg.data.split, cfg.data.data_dir, **cfg.data.options
            )
        )
        if cfg.data.limit is not None:
            problems = problems[: cfg.data.limit]
        self.sampler = ProblemSampler(
            problems, cfg.rollout.questions_per_step, cfg.train.seed, cfg.data.shuffle
        )

        device = self.dist.device(cfg.model.device)
        model = self._load_policy(device)
        self.model = model
        self.device = torch.device(device)
        rollout_dtype = None if cfg.rollout.dtype == "auto" else DTYPES[cfg.rollout.dtype]
        self.generator = TransformersGenerator(
            model,
            self.tokenizer,
            batch_size=cfg.rollout.batch_size,
            inference_copy=cfg.rollout.inference_copy,
            dtype=rollout_dtype,
        )
        for module in cfg.reward.plugins:
            importlib.import_module(module)
        self.rewards = RewardSuite(
            cfg.reward.weights,
            workers=cfg.reward.workers,
            timeout=cfg.reward.timeout,
            checking=cfg.reward.checking,
        )

        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg.optim.lr,
            betas=(cfg.optim.beta1, cfg.optim.beta2),
            weight_decay=cfg.optim.weight_decay,
        )
        algo = cfg.algorithm
        updates = cfg.train.max_steps * algo.minibatches * algo.num_iterations
        self.scheduler = _schedule(
            self.optimizer, cfg.optim.schedule, cfg.optim.warmup_ratio, updates
        )
        self.use_algorithm(algo)
        self.step = 0
        resumed = self._resume() if resume else False
        resume_step = self.step if resumed else None
        main = self.dist.is_main
        self.log = (
            MetricsLog(self.run_dir, tensorboard=cfg.train.tensorboard, resume_step=resume_step)
            if main
            else _SilentLog(self.run_dir / "metrics.jsonl")
        )
        self.rollout_log = None
        if cfg.train.log_rollouts:
            path = self.run_dir / "rollouts.jsonl"
            self.rollout_log = JsonlLog(path, resume_step) if main else _SilentLog(path)
        self.heldout = HeldoutEvaluation.from_config(
            cfg, self.generator, self.tokenizer, self.rewards, self.dist, self.run_dir, resume_step
        )
        self._stop_requested = False
        self.stop_signal: int | None = None

    def _load_policy(self, device: str) -> torch.nn.Module:
        """The policy to train (LoRA attached when configured), dropout off; its tokenizer goes
        to self.tokenizer."""
        cfg = self.config
        model, self.tokenizer = load_model(
            cfg.model.name, dtype=cfg.model.dtype, device=device, seed=cfg.model.seed
        )
        if cfg.model.lora:
            model = attach_lora(
                model,
                LoraSettings(
                    r=cfg.model.lora_r,
                    alpha=cfg.model.lora_alpha,
                    dropout=cfg.model.lora_dropout,
                    target_modules=cfg.model.lora_target_modules,
                ),
            )
        # Dropout off (as TRL's disable_dropout): the log-probs of the loss must be those of the
        # policy that sampled, and logp_old is recorded from a training forward pass.
        model.eval()
        if cfg.model.gradient_checkpointing:
            # transformers >= 5.24 names it activation_checkpointing_enable (the old name warns)
            enable = getattr(model, "activation_checkpointing_enable", None)
            (enable or model.gradient_checkpointing_enable)()
            if cfg.model.lora:
                model.enable_input_require_grads()
            # transformers checkpoints layers only in training mode: train mode, dropout at 0.
            for module in model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
            model.train()
        return model

    def use_algorithm(self, algo: AlgorithmConfig) -> None:
        """Set the algorithm options (the config's algorithm section) and what derives from
        them: the advantage estimator, the loss settings and AdaptiveLambda (AMIR only; a new
        one starts at lambda_init)."""
        self.config = dataclasses.replace(self.config, algorithm=algo)
        self.estimator = get_advantage_estimator(algo.advantage)
        # set by learn() for its batch: the estimator runs micro-batch by micro-batch
        self._per_micro_batch = False
        self.advantage_settings = AdvantageSettings(
            scale=algo.scale_rewards,
            std=algo.advantage_std,
            eps=algo.advantage_eps,
            lens_alpha=algo.lens_alpha,
            lens_mode=algo.lens_mode,
            lens_difficulty=algo.lens_difficulty,
        )
        self.loss_settings = LossSettings(
            eps_low=algo.eps_low,
            eps_high=algo.eps_high,
            ratio_level=algo.loss_level,
            aggregation=algo.aggregation,
            max_completion_length=self.config.rollout.max_new_tokens,
            kl_coef=algo.kl_coef,
        )
        self.lambda_reg = AdaptiveLambda.from_options(algo) if algo.amir else None
        self.needs_reference = algo.kl_coef > 0 or (algo.amir and not algo.ref_free)

    # -----------------------------------------------------------------------------------------
    # The loop

    def train(self) -> Path:
        """Runs until train.max_steps, checkpointing; returns the final adapter/model folder.

        Ctrl-C (SIGINT) or SIGTERM finishes the current step, writes a checkpoint and returns;
        `groupwise train ... --resume` continues from there.
        """
        cfg = self.config
        bar = tqdm(
            total=cfg.train.max_steps,
            initial=self.step,
            disable=not (cfg.train.progress and self.dist.is_main),
            desc="train",
            unit="step",
            dynamic_ncols=True,
        )
        progress = ProgressLine()
        with self._graceful_stop():
            if self.heldout is not None and self.step == 0:
                self.heldout.at(0)
            while self.step < cfg.train.max_steps and not self._stop_requested:
                record, samples = self.train_step()
                self.step += 1
                if self.heldout is not None:
                    record.update(self.heldout.at(self.step))
                # A signal may reach one process only; all stop after the same step.
                self._stop_requested = self.dist.any(self._stop_requested)
                self.log.write(record)
                if self.rollout_log is not None:
                    self.rollout_log.write(samples)
                bar.update(1)
                bar.set_postfix(progress.postfix(record))
                if self.step % cfg.train.save_every == 0 or self.step == cfg.train.max_steps:
                    self.save()
            if self._stop_requested and self.step < cfg.train.max_steps:
                self.save()
            else:
                self.stop_signal = None  # a signal during the last step: the run finished
        bar.close()
        self.log.close()
        if self.rollout_log is not None:
            self.rollout_log.close()
        final = self.export() if self.step >= cfg.train.max_steps else self.run_dir
        self.dist.close()
        self.close()
        return final

    def close(self) -> None:
        """Release the run folder's lock if this trainer opened it (train() does at its end)."""
        if self._owns_folder and self.folder is not None:
            self.folder.close()

    def train_step(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """One step: rollout -> score -> advantages -> updates (mini-batches x epochs).

        Returns (metrics, samples): the step's metrics.jsonl line and its rollouts.jsonl line.
        """
        algo = self.config.algorithm
        t_start = time.perf_counter()
        problems = self.sampler.batch(self.step)
        questions = self.dist.question_shard(len(problems), algo.minibatches)
        rollouts = self._rollout(problems, questions)
        t_generated = time.perf_counter()
        batch = self._score(problems, questions, rollouts)
        t_scored = time.perf_counter()
        updates = self.learn(batch)
        t_trained = time.perf_counter()
        times = (t_start, t_generated, t_scored, t_trained)
        return self._step_record(problems, batch, updates, times)

    def learn(self, batch: StepBatch) -> list[dict[str, float]]:
        """Advantages and pairs of a scored rollout batch, then its updates: for each epoch,
        one optimizer step per mini-batch. Fills batch.advantages/rewards/chosen/rejected;
        returns each update's metrics."""
        algo = self.config.algorithm
        minibatches = self._minibatches(len(batch.rollouts))
        self._per_micro_batch = (
            self.estimator.needs_rollout_logp
            and self.estimator.per_group
            and not algo.amir
            and len(minibatches) == 1
        )
        old = self._rollout_logprobs(batch.rollouts, minibatches)
        if self._per_micro_batch:
            batch.advantages = torch.zeros(len(batch.scores.total))
            batch.rewards = batch.scores.total.float().clone()
            batch.chosen = batch.rejected = torch.zeros(0, dtype=torch.long)
        else:
            self._advantages(batch, old)
        updates = [
            self._update(batch, old, rows, on_policy=epoch == m == 0, first_use=epoch == 0)
            for epoch in range(algo.num_iterations)
            for m, rows in enumerate(minibatches)
        ]
        if self._per_micro_batch:  # each process filled its own rows
            batch.advantages = self._to_batch(batch.rows, batch.advantages[batch.rows])
            batch.rewards = self._to_batch(batch.rows, batch.rewards[batch.rows])
        return updates

    # -----------------------------------------------------------------------------------------
    # Rollout, score, advantages

    def _rollout(self, problems: list[Any], questions: list[int]) -> Rollouts:
        """This process's completions: group_size of each of its questions, in that order."""
        cfg = self.config
        prompts = [render_prompt(problems[q], cfg.data.prompt, self.tokenizer) for q in questions]
        sampling = SamplingParams(
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
            max_new_tokens=cfg.rollout.max_new_tokens,
        )
        # One random stream per question, keyed by its data position: the same samples
        # whichever process draws them.
        first = self.step * cfg.rollout.questions_per_step
        seeds = [cfg.train.seed * 1_000_003 + first + q for q in questions]
        try:
            return self.generator.generate(
                prompts, cfg.rollout.group_size, sampling, prompt_seeds=seeds
            )
        except NonFiniteError as err:
            raise err.at_step(self.step + 1, self._divergence_hint()) from None

    def _score(self, problems: list[Any], questions: list[int], rollouts: Rollouts) -> StepBatch:
        """Rewards of this process's completions, then the whole batch's, in question order."""
        group_size = self.config.rollout.group_size
        golds = [problems[q].answer for q in questions for _ in range(group_size)]
        scores = self.rewards.score(rollouts.texts, golds)
        offsets = torch.arange(group_size)
        rows = (torch.tensor(questions).unsqueeze(1) * group_size + offsets).reshape(-1)
        parts = self.dist.gather((rows, scores, rollouts.texts, rollouts.truncated))
        order = torch.argsort(torch.cat([part[0] for part in parts]))
        texts = [text for part in parts for text in part[2]]
        return StepBatch(
            rollouts=rollouts,
            rows=rows,
            scores=_take_scores(_concat_scores([part[1] for part in parts]), order),
            texts=[texts[i] for i in order.tolist()],
            truncated=torch.cat([part[3] for part in parts])[order],
        )

    def _rollout_logprobs(self, rollouts: Rollouts, minibatches: list[slice]) -> RolloutLogprobs:
        """logp_old of every row the updates will need before their first training forward
        under the rollout policy (module docstring), from one no-grad pass."""
        old = RolloutLogprobs(len(rollouts), rollouts.completion_ids.shape[1])
        whole_batch = self.estimator.needs_rollout_logp and not self._per_micro_batch
        upfront = minibatches if whole_batch else minibatches[1:]
        with torch.no_grad():
            for minibatch in upfront:
                for rows in self._micro_batches(minibatch):
                    old.record(rows, self._logprobs(self.model, rollouts, rows))
        return old

    def _advantages(self, batch: StepBatch, old: RolloutLogprobs) -> None:
        """The estimator's advantages and AMIR's pairs over the whole batch (REFERENCE.md 1-3)."""
        cfg = self.config
        mean_logp_old = lengths = None
        if self.estimator.needs_rollout_logp:
            mask = batch.rollouts.completion_mask.bool()
            local = sequence_mean_logp(old.of(slice(None)), mask)
            mean_logp_old = self._to_batch(batch.rows, local)
            lengths = self._to_batch(batch.rows, mask.sum(dim=1).float())
        result = self._estimate(batch, slice(None), mean_logp_old, lengths)
        chosen = rejected = torch.zeros(0, dtype=torch.long)
        if cfg.algorithm.amir:
            chosen, rejected = mine_pairs(
                result.rewards,
                cfg.rollout.group_size,
                cfg.algorithm.margin,
                mode=cfg.algorithm.pair_mode,
                max_pairs_per_group=cfg.algorithm.max_pairs_per_group,
            )
        batch.advantages, batch.rewards = result.advantages, result.rewards
        batch.chosen, batch.rejected = chosen, rejected

    def _micro_batch_advantages(self, batch: StepBatch, old: RolloutLogprobs, micro: slice) -> None:
        """The estimator's advantages of the micro-batch's groups alone, from their logp_old
        just recorded by the training pass (a per-group estimator without AMIR, module
        docstring): the values the whole batch's call gives these rows."""
        mask = batch.rollouts.completion_mask[micro].bool()
        rows = batch.rows[micro]
        mean_logp_old = sequence_mean_logp(old.of(micro), mask)
        result = self._estimate(batch, rows, mean_logp_old, mask.sum(dim=1).float())
        batch.advantages[rows], batch.rewards[rows] = result.advantages, result.rewards

    def _estimate(
        self,
        batch: StepBatch,
        rows: slice | torch.Tensor,
        mean_logp_old: torch.Tensor | None,
        lengths: torch.Tensor | None,
    ) -> Advantages:
        """The estimator on the batch's `rows` (whole groups, group-major) with their rollout
        l(q, o) and lengths ([rows], or None where the estimator needs none)."""
        cfg = self.config
        scores = batch.scores
        component = cfg.reward.correctness_component
        weight = self.rewards.weights.get(component, 0.0)
        column = scores.columns.get(component, torch.zeros_like(scores.total))
        return self.estimator.fn(
            GroupRewards(
                rewards=scores.total[rows].float(),
                correct=scores.correct[rows],
                group_size=cfg.rollout.group_size,
                correctness=weight * column[rows].float(),
                correct_reward=weight * correct_value(component) if weight else 1.0,
                mean_logp_old=mean_logp_old,
                lengths=lengths,
            ),
            self.advantage_settings,
        )

    # -----------------------------------------------------------------------------------------
    # One update

    def _update(
        self, batch: StepBatch, old: RolloutLogprobs, rows: slice, on_policy: bool, first_use: bool
    ) -> dict[str, float]:
        """One optimizer step on this process's `rows` (whole groups of one mini-batch) and the
        other processes' rows of the same mini-batch.

        on_policy: no step has been taken since the rollout (ratio exactly 1). first_use: the
        rows' first epoch, when AdaptiveLambda observes the losses (REFERENCE.md 2).
        """
        algo = self.config.algorithm
        mask = batch.rollouts.completion_mask.bool()
        pairs = self._local_pairs(batch, rows)
        totals = self.dist.sum([rows.stop - rows.start, int(mask[rows].sum()), pairs[0].numel()])
        batch_rows, batch_tokens, batch_pairs = (int(t) for t in totals)
        measure_grad = self.lambda_reg is not None and self.lambda_reg.measures_gradient(self.step)
        pref_grads = [torch.zeros_like(p) for p in self.params] if measure_grad else []
        diagnose = self.config.train.log_all_wrong_gradient
        all_wrong = _all_wrong_rows(batch, self.config.rollout.group_size) if diagnose else None
        wrong_grads = [torch.zeros_like(p) for p in self.params] if diagnose else []
        sums = MetricSums()
        for micro in self._micro_batches(rows):
            terms, pref, inputs = self._micro_batch_terms(
                batch, old, micro, on_policy, pairs, batch_pairs
            )
            rows_n, tokens = micro.stop - micro.start, int(mask[micro].sum())
            share = micro_batch_share(algo.aggregation, rows_n, tokens, batch_rows, batch_tokens)
            if diagnose:
                wrong = all_wrong[batch.rows[micro]].to(self.device)
                self._add_all_wrong_gradient(wrong_grads, wrong, inputs, batch_rows, batch_tokens)
            policy_and_kl = terms.grpo(algo.kl_coef)
            if self.lambda_reg is not None and first_use:
                self._observe_losses(float(policy_and_kl.detach()) * share, share, pref)
            loss = share * policy_and_kl + self._preference_part(terms, pref_grads)
            check_finite(loss.detach(), "loss", step=self.step + 1, hint=self._divergence_hint())
            loss.backward()
            sums.add(**_micro_batch_metrics(terms, pref, share, tokens / batch_tokens))
        self.dist.sum_gradients(self.params, [*pref_grads, *wrong_grads])
        if measure_grad:
            self._combine_measured_preference(pref_grads)
        max_norm = self.config.optim.max_grad_norm
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        diagnostics = _all_wrong_gradient_share(wrong_grads, grad_norm) if diagnose else {}
        # The norm is the same on every process (after the all-reduce): all stop together,
        # before the step, so the weights and the last checkpoint stay as they were.
        check_finite(grad_norm, "gradient norm", step=self.step + 1, hint=self._divergence_hint())
        learning_rate = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {**sums.total(self.dist), "pairs": batch_pairs, "grad_norm": grad_norm,
                "learning_rate": learning_rate, **diagnostics}

    def _micro_batch_terms(
        self,
        batch: StepBatch,
        old: RolloutLogprobs,
        micro: slice,
        on_policy: bool,
        pairs: tuple[torch.Tensor, torch.Tensor],
        batch_pairs: int,
    ) -> tuple[LossTerms, PreferenceTerms | None, LossInputs]:
        """The forward passes of one micro-batch, its loss terms (groupwise.algorithms) and
        the per-row inputs they were computed from."""
        mask = batch.rollouts.completion_mask[micro].bool().to(self.device)
        ref_logp = self._reference_logprobs(batch.rollouts, micro)
        logp = self._logprobs(self.model, batch.rollouts, micro)
        if on_policy:
            old.record(micro, logp)
            if self._per_micro_batch:
                self._micro_batch_advantages(batch, old, micro)
        pref = self._preference(old, micro, mask, ref_logp, pairs, batch_pairs)
        inputs = LossInputs(
            logp,
            mask,
            batch.advantages[batch.rows[micro]].to(logp.device),
            old_logp=None if on_policy else old.of(micro).to(logp.device),
            ref_logp=ref_logp,
        )
        coefficients = None if pref is None else pref.coefficients.to(logp.device)
        return inputs.terms(self.loss_settings, coefficients), pref, inputs

    def _preference_part(self, terms: LossTerms, pref_grads: list[torch.Tensor]) -> Any:
        """lambda * the AMIR term, to add to the micro-batch's loss; or, when lambda is measured
        by gradients this step, 0, with the term's gradient kept apart in pref_grads."""
        if terms.preference is None:
            return 0.0
        if not pref_grads:
            return self.lambda_reg.value * terms.preference
        _add_gradient(pref_grads, terms.preference, self.params)
        return 0.0

    def _preference(
        self,
        old: RolloutLogprobs,
        micro: slice,
        mask: torch.Tensor,
        ref_logp: torch.Tensor | None,
        pairs: tuple[torch.Tensor, torch.Tensor],
        batch_pairs: int,
    ) -> PreferenceTerms | None:
        """AMIR's coefficients of the micro-batch's rows from their l_old (None without AMIR).

        Micro-batches hold whole groups, so every pair of these rows lies inside them; the
        normaliser is the update's pair count over every process (REFERENCE.md 2)."""
        algo = self.config.algorithm
        if not algo.amir:
            return None
        chosen, rejected = pairs
        inside = (chosen >= micro.start) & (chosen < micro.stop)
        mask = mask.cpu()
        ref_mean = None if algo.ref_free else sequence_mean_logp(ref_logp.cpu(), mask)
        return preference_coefficients(
            sequence_mean_logp(old.of(micro), mask),
            ref_mean,
            chosen[inside] - micro.start,
            rejected[inside] - micro.start,
            algo.beta_dpo,
            num_pairs=batch_pairs,
        )

    def _add_all_wrong_gradient(
        self,
        buffers: list[torch.Tensor],
        wrong: torch.Tensor,
        inputs: LossInputs,
        batch_rows: int,
        batch_tokens: int,
    ) -> None:
        """train.log_all_wrong_gradient: add to `buffers` the gradient of the all-wrong rows'
        part of the micro-batch's share * L_GRPO. wrong: [b] bool, the micro-batch's rows of
        all-wrong groups.

        A micro-batch's aggregated loss splits exactly into row subsets, each weighted by its
        own share of the update (micro_batch_share), so this is the all-wrong rows' exact
        contribution to the update's gradient (REFERENCE.md 1 and 3)."""
        algo = self.config.algorithm
        if not bool((inputs.advantages[wrong] != 0).any()) and algo.kl_coef == 0:
            return  # no such rows, or all their advantages are 0: a zero gradient, no backward
        part = inputs.rows(wrong)
        share = micro_batch_share(
            algo.aggregation, int(wrong.sum()), int(part.mask.sum()), batch_rows, batch_tokens
        )
        loss = share * part.terms(self.loss_settings).grpo(algo.kl_coef)
        _add_gradient(buffers, loss, self.params)

    def _observe_losses(self, weighted_pg: float, share: float, pref: PreferenceTerms) -> None:
        """One loss computation for AdaptiveLambda: the k-th micro-batches of every process,
        L_GRPO pooled by their shares and L_pref by their pairs, so that every process applies
        the same update (none where no process has a pair)."""
        pg_sum, share_sum, pref_sum, pairs = self.dist.sum(
            [weighted_pg, share, float(pref.pair_losses.sum()), pref.pair_losses.numel()]
        )
        if pairs > 0:
            self.lambda_reg.observe_losses(pg_sum / share_sum, pref_sum / pairs)

    def _combine_measured_preference(self, pref_grads: list[torch.Tensor]) -> None:
        """lambda_measure=grad: the GRPO gradient is what .grad accumulated, the preference
        gradient was kept apart; measure their norms, update lambda, then add lambda times it."""
        pg_norm = torch.sqrt(
            sum((p.grad.float() ** 2).sum() for p in self.params if p.grad is not None)
        )
        pref_norm = torch.sqrt(sum((g.float() ** 2).sum() for g in pref_grads))
        self.lambda_reg.observe_gradient_norms(float(pg_norm), float(pref_norm))
        for p, g in zip(self.params, pref_grads, strict=True):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.add_(g, alpha=self.lambda_reg.value)

    def _step_record(
        self,
        problems: list[Any],
        batch: StepBatch,
        updates: list[dict[str, float]],
        times: tuple[float, float, float, float],
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The step's metrics.jsonl and rollouts.jsonl lines."""
        cfg = self.config
        group_size = cfg.rollout.group_size
        t_start, t_generated, t_scored, t_trained = times
        tokens = int(self.dist.sum([int(batch.rollouts.completion_mask.sum())])[0])
        pairs = sum(u["pairs"] for u in updates)
        metrics = {
            "step": self.step + 1,
            "epoch": self.sampler.epoch(self.step + 1),
            **_reward_metrics(batch.scores, group_size),
            **{key: _mean(updates, key) for key in _PER_UPDATE},
            "updates": len(updates),
            "preference_loss": _total(updates, "preference_loss_sum") / pairs if pairs else 0.0,
            "pair_logp_margin": _total(updates, "pair_logp_margin_sum") / pairs if pairs else 0.0,
            "pairs": int(batch.chosen.numel()),
            "pairs_per_group": batch.chosen.numel() / len(problems),
            **({"lambda": self.lambda_reg.value} if self.lambda_reg is not None else {}),
            "group_all_wrong_active": all_wrong_with_gradient(
                batch.scores.correct, batch.advantages, group_size
            ),
            **(_all_wrong_metrics(updates) if cfg.train.log_all_wrong_gradient else {}),
            "advantage_abs_mean": float(batch.advantages.abs().mean()),
            "reward_used_mean": float(batch.rewards.mean()),
            "learning_rate": updates[-1]["learning_rate"],
            "completion_length_mean": tokens / len(batch.texts),
            "truncated_fraction": float(batch.truncated.float().mean()),
            "completion_tokens": tokens,
            "seconds_generation": t_generated - t_start,
            "seconds_scoring": t_scored - t_generated,
            "seconds_training": t_trained - t_scored,
            "seconds_step": t_trained - t_start,
            "tokens_per_second": tokens / max(t_trained - t_start, 1e-9),
        }
        samples = {
            "step": self.step + 1,
            "problem_ids": [p.id for p in problems],
            "completions": batch.texts,
            "golds": [p.answer for p in problems for _ in range(group_size)],
            "correct": batch.scores.correct.tolist(),
            "reward_columns": {k: v.tolist() for k, v in batch.scores.columns.items()},
            "rewards": batch.rewards.tolist(),
            "advantages": batch.advantages.tolist(),
            "pairs": [batch.chosen.tolist(), batch.rejected.tolist()],
        }
        return metrics, samples

    def _divergence_hint(self) -> str:
        return (
            f"lower optim.lr (now {self.config.optim.lr:g}) and start a new run (--overwrite or "
            "another train.output_dir); the checkpoints so far are intact"
        )

    # -----------------------------------------------------------------------------------------
    # Rows, passes and gathering

    def _minibatches(self, rows: int) -> list[slice]:
        """This process's rows of each mini-batch: its questions are mini-batch-major."""
        per = rows // self.config.algorithm.minibatches
        return [slice(start, start + per) for start in range(0, rows, per)]

    def _micro_batches(self, rows: slice) -> list[slice]:
        """`rows` in micro-batches of whole groups (at least one group each)."""
        group_size = self.config.rollout.group_size
        per = max(group_size, self.config.train.micro_batch_size // group_size * group_size)
        return [slice(s, min(s + per, rows.stop)) for s in range(rows.start, rows.stop, per)]

    def _logprobs(self, model: torch.nn.Module, rollouts: Rollouts, rows: slice) -> torch.Tensor:
        """Token log-probs [rows, T] of whole groups of completions under `model` (at the
        sampling temperature, REFERENCE.md 1); each group's prompt runs once."""
        group_size = self.config.rollout.group_size
        prompts = slice(rows.start // group_size, rows.stop // group_size)
        return completion_logprobs(
            model,
            rollouts.prompt_ids[prompts].to(self.device),
            rollouts.prompt_mask[prompts].to(self.device),
            rollouts.completion_ids[rows].to(self.device),
            rollouts.completion_mask[rows].to(self.device),
            temperature=self.config.rollout.temperature,
            group_size=group_size,
        )

    def _reference_logprobs(self, rollouts: Rollouts, rows: slice) -> torch.Tensor | None:
        """Token log-probs under the reference policy (the adapter disabled), when the KL term
        or AMIR with a reference needs them; None otherwise."""
        if not self.needs_reference:
            return None
        with torch.no_grad(), reference_policy(self.model):
            return self._logprobs(self.model, rollouts, rows)

    def _local_pairs(self, batch: StepBatch, rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """The pairs whose rows are this process's `rows`, as this process's row indices."""
        local = torch.full((batch.advantages.numel(),), -1, dtype=torch.long)
        local[batch.rows] = torch.arange(batch.rows.numel())
        chosen, rejected = local[batch.chosen], local[batch.rejected]
        inside = (chosen >= rows.start) & (chosen < rows.stop)
        return chosen[inside], rejected[inside]

    def _to_batch(self, rows: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """Every process's [b] values placed at their rows of the whole batch: [B]."""
        parts = self.dist.gather((rows, local.cpu()))
        rows_all = torch.cat([part[0] for part in parts])
        out = torch.zeros(rows_all.numel(), dtype=local.dtype)
        out[rows_all] = torch.cat([part[1] for part in parts])
        return out

    # -----------------------------------------------------------------------------------------
    # Checkpoints, resume, export

    def _state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "lambda_reg": self.lambda_reg.state_dict() if self.lambda_reg is not None else None,
            "rng": rng_state(),
            "data_position": self.step * self.config.rollout.questions_per_step,
        }

    def save(self) -> Path | None:
        """RUN/checkpoints/step-N (rank 0 writes it; the other processes return None)."""
        if not self.dist.is_main:
            return None
        return save_checkpoint(
            self.run_dir,
            self.step,
            self.model,
            self.tokenizer,
            self._state(),
            keep=self.config.train.keep_checkpoints,
        )

    def _resume(self) -> bool:
        """Load the newest intact checkpoint (rank 0's folder chose it and set damaged newer
        ones aside; the other ranks look for the same one). False when there is none."""
        point = self.folder.resume_point if self.folder is not None else None
        checkpoint = (point or find_resume_point(self.run_dir)).checkpoint
        if checkpoint is None:
            return False
        state = load_trainer_state(checkpoint)
        load_weights_into(self.model, checkpoint)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.lambda_reg is not None:
            self.lambda_reg.load_state_dict(state["lambda_reg"])
        set_rng_state(state["rng"])
        self.step = int(state["step"])
        return True

    def export(self) -> Path:
        """RUN/final/adapter (or model), and RUN/final/merged when train.export_merged (written
        by rank 0; every process returns the path)."""
        final = self.run_dir / "final"
        target = final / ("adapter" if self.config.model.lora else "model")
        if not self.dist.is_main:
            return target
        self.model.save_pretrained(target)
        self.tokenizer.save_pretrained(target)
        if self.config.train.export_merged:
            save_merged(self.model, self.tokenizer, final / "merged")
        return target

    @contextmanager
    def _graceful_stop(self) -> Iterator[None]:
        def request_stop(signum: int, frame: Any) -> None:
            if self._stop_requested:
                raise KeyboardInterrupt
            self._stop_requested = True
            self.stop_signal = signum

        try:
            previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: signals stay as they are
            previous = {}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


class _SilentLog:
    """What the processes other than rank 0 hold in place of a log: its path, no writes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        """Rank 0 writes every process's numbers; nothing to do here."""

    def close(self) -> None:
        """Nothing is open."""


def _schedule(
    optimizer: torch.optim.Optimizer, name: str, warmup_ratio: float, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ceil(warmup_ratio * total) updates, then cosine/linear/constant."""
    warmup = math.ceil(warmup_ratio * total)

    def factor(update: int) -> float:
        if update < warmup:
            return (update + 1) / (warmup + 1)
        progress = (update - warmup) / max(1, total - warmup)
        if name == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        if name == "linear":
            return max(0.0, 1.0 - progress)
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _reward_metrics(scores: Scores, group_size: int) -> dict[str, float]:
    kinds = group_types(scores.correct, group_size)
    metrics = {
        "reward_mean": float(scores.total.float().mean()),
        "reward_std": float(scores.total.float().std(unbiased=False)),
        "accuracy": float(scores.correct.float().mean()),
        "group_all_correct": float(kinds["all_correct"].float().mean()),
        "group_all_wrong": float(kinds["all_wrong"].float().mean()),
        "group_mixed": float(kinds["mixed"].float().mean()),
    }
    for name, column in scores.columns.items():
        metrics[f"reward_{name}_mean"] = float(column.float().mean())
    for status in ("timeout", "no_answer", "error"):
        metrics[f"answers_{status}"] = sum(v.status == status for v in scores.verdicts)
    return metrics


def _concat_scores(parts: list[Scores]) -> Scores:
    """The Scores of several slices of a batch (one per process, in rank order) as one."""
    if len(parts) == 1:
        return parts[0]
    return Scores(
        columns={k: torch.cat([p.columns[k] for p in parts]) for k in parts[0].columns},
        weights=parts[0].weights,
        total=torch.cat([p.total for p in parts]),
        correct=torch.cat([p.correct for p in parts]),
        verdicts=[v for p in parts for v in p.verdicts],
    )


def _take_scores(scores: Scores, order: torch.Tensor) -> Scores:
    """The rows `order` of scores, in that order."""
    return Scores(
        columns={k: v[order] for k, v in scores.columns.items()},
        weights=scores.weights,
        total=scores.total[order],
        correct=scores.correct[order],
        verdicts=[scores.verdicts[i] for i in order.tolist()],
    )


def _micro_batch_metrics(
    terms: LossTerms, pref: PreferenceTerms | None, share: float, token_share: float
) -> dict[str, float]:
    """A micro-batch's part of its update's metrics: losses by their share of the update, clip
    statistics by its share of the tokens, pair sums as they are."""
    return {
        "policy_loss": share * float(terms.policy.detach()),
        "kl": share * float(terms.kl.detach()) if terms.kl is not None else 0.0,
        **{name: float(value) * token_share for name, value in terms.clip.items()},
        "preference_loss_sum": float(pref.pair_losses.sum()) if pref is not None else 0.0,
        "pair_logp_margin_sum": float(pref.logp_margins.sum()) if pref is not None else 0.0,
    }


# Update metrics averaged over the step's updates (mini-batches x epochs).
_PER_UPDATE = (
    "policy_loss",
    "kl",
    "clip_fraction_low",
    "clip_fraction_high",
    "clip_fraction",
    "ratio_mean",
    "grad_norm",
)


def _all_wrong_rows(batch: StepBatch, group_size: int) -> torch.Tensor:
    """[B] bool: the whole batch's rows whose group has no correct completion."""
    return group_types(batch.scores.correct, group_size)["all_wrong"].repeat_interleave(group_size)


def _all_wrong_gradient_share(wrong_grads: list[torch.Tensor], grad_norm: float
                              ) -> dict[str, float]:
    """The all-wrong part's gradient norm and its ratio to the update's (pre-clip) gradient
    norm; 0 when the update has no gradient. The parts are not orthogonal, so the ratio can
    exceed 1 where the other rows' gradient partly cancels it."""
    norm = float(torch.sqrt(sum((g.float() ** 2).sum() for g in wrong_grads)))
    return {"all_wrong_grad_norm": norm,
            "all_wrong_grad_share": norm / grad_norm if grad_norm > 0 else 0.0}


def _all_wrong_metrics(updates: list[dict[str, float]]) -> dict[str, float]:
    """train.log_all_wrong_gradient's step metrics: the updates' mean all-wrong gradient norm
    and share."""
    return {
        "all_wrong_grad_norm": _mean(updates, "all_wrong_grad_norm"),
        "all_wrong_grad_share": _mean(updates, "all_wrong_grad_share"),
    }


def _add_gradient(buffers: list[torch.Tensor], loss: torch.Tensor, params: list) -> None:
    """Add d loss / d params to `buffers`, keeping the graph for the update's own backward."""
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    for buffer, grad in zip(buffers, grads, strict=True):
        if grad is not None:
            buffer.add_(grad)


def _mean(updates: list[dict[str, float]], key: str) -> float:
    return sum(u[key] for u in updates) / len(updates)


def _total(updates: list[dict[str, float]], key: str) -> float:
    return sum(u[key] for u in updates)
