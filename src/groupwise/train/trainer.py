"""The training loop for GRPO, AMIR-GRPO, LENS and GSPO (and AMIR-GRPO + LENS).

One step, top to bottom (`Trainer.train_step`):

    questions -> rollout -> score (reward columns) -> targets (advantages, AMIR pairs)
              -> for each epoch, for each mini-batch: one update (train.update.Updater):
                 micro-batches of  share * (policy + gamma * KL) + lambda * preference
                 -> backward -> all-reduce -> clip -> AdamW step

Every algorithm decision is a call into groupwise.algorithms (docs/design.md): `group_targets` (the
advantage estimator by name, AMIR's pairs on its reward totals, AMIR's per-completion
coefficients), the loss terms of a micro-batch and the adaptive lambda. This file is plumbing
around them; the update itself is train/update.py, the diagnostics that keep a part of the
gradient apart are train/probes.py, what a step logs is train/step_metrics.py.

Rollout-policy log-probs (logp_old; LENS's confidences and AMIR's l_old are their means): a row's
are taken from its first forward pass under the rollout policy. While no optimizer step has
been taken in this step, that is the training forward pass itself (no extra pass: the first
update is exactly on-policy, ratio 1). Rows whose values are needed before that, or after the
policy has moved, get them from one no-grad pass right after the rollout: the rows of
mini-batches 2..M (docs/algorithms.md §1, PPO mini-batches), and every row when the estimator needs
them over the whole batch before the first update. That is LENS with AMIR-GRPO (the update's
pair count, which normalises L_pref, depends on LENS's rewards) or with several mini-batches;
LENS alone with one mini-batch computes each micro-batch's targets from that micro-batch's own
training pass (its groups are whole and LENS is per group), so it costs no pass. AMIR's
coefficients are computed micro-batch by micro-batch, from the rows' l_old and the update's pair
count.

Micro-batches hold whole groups and every share is taken of the update's GLOBAL batch
(completions, tokens, pairs), so summing micro-batches and processes (one all-reduce before
clipping) gives the gradient of the whole update. Each group's prompt runs through the model
once, its key/value cache shared by the group's completions (groupwise.scoring); generation runs
on a merged (optionally bfloat16) inference copy of the policy (groupwise.rollout).

Several processes (torchrun / accelerate launch; groupwise.train.distributed): each takes its own
whole questions of every mini-batch; rewards, targets and pairs are computed over the gathered
batch in question order, the k-th micro-batches of all processes feed AdaptiveLambda together,
so lambda is the same everywhere. Rank 0 writes the logs, checkpoints and final model.
"""

from __future__ import annotations

import importlib
import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from groupwise.algorithms import (
    GroupTargets,
    LossSettings,
    LossTerms,
    PairlessWarning,
    get_advantage_estimator,
    group_targets,
    group_types,
    loss_terms,
    micro_batch_share,
    sequence_mean_logp,
)
from groupwise.data import MixPart, load_benchmark, load_mix, render_prompt
from groupwise.errors import NonFiniteError
from groupwise.models import (
    DTYPES,
    LoraSettings,
    attach_lora,
    load_model,
    reference_policy,
    save_merged,
)
from groupwise.rewards import RewardSuite, correct_value
from groupwise.rollout import Rollouts, SamplingParams, TransformersGenerator
from groupwise.scoring import completion_logprobs
from groupwise.train.batch import (
    Learned,
    RolloutLogprobs,
    ScoredBatch,
    concat_scores,
    take_scores,
)
from groupwise.train.checkpoint import (
    find_resume_point,
    load_trainer_state,
    load_weights_into,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from groupwise.train.config import Config
from groupwise.train.distributed import Distributed
from groupwise.train.heldout import HeldoutEvaluation
from groupwise.train.metrics_log import JsonlLog, MetricsLog
from groupwise.train.probes import AllWrongGradient, GradientProbe, PreferenceGradient
from groupwise.train.progress import ProgressLine
from groupwise.train.run_folder import RunFolder
from groupwise.train.sampler import ProblemSampler
from groupwise.train.step_metrics import micro_batch_metrics, step_metrics, step_samples
from groupwise.train.update import MicroBatchLoss, Updater


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class UpdatePlan:
    """One update's place in the step. rows: this process's rows (whole groups of one
    mini-batch). on_policy: no optimizer step yet in this step (ratio exactly 1). first_use: the
    rows' first epoch, when AdaptiveLambda observes the losses (docs/algorithms.md §2). totals: the
    update's rows, completion tokens and AMIR pairs over every process."""

    rows: slice
    on_policy: bool
    first_use: bool
    totals: tuple[int, int, int]


class Trainer:
    """Owns the model, the updater (optimizer, schedule), AdaptiveLambda and the run folder."""

    def __init__(self, config: Config, resume: bool = False, folder: RunFolder | None = None):
        """Builds everything a run needs; rank 0 first opens (locks) the run folder, unless the
        caller opened it: `groupwise train` does, before any model or data is loaded."""
        self.config = config
        self.dist = Distributed()
        parts = self.dist.world_size * config.algorithm.minibatches
        if config.rollout.questions_per_step % parts:
            raise ValueError(
                f"rollout.questions_per_step={config.rollout.questions_per_step} must be "
                f"divisible by the number of processes ({self.dist.world_size}) x "
                f"algorithm.minibatches ({config.algorithm.minibatches}): each process takes "
                "whole questions of each mini-batch"
            )
        self.run_dir = Path(config.train.output_dir)
        self.folder = folder
        self._owns_folder = folder is None and self.dist.is_main
        if self._owns_folder:
            self.folder = RunFolder.open(self.run_dir, config, "resume" if resume else "fresh")
        try:
            self._build(resume)
        except BaseException:
            self.close()  # a failed start must not keep the folder locked
            raise

    def _build(self, resume: bool) -> None:
        """Data, model, generator, rewards, updater, algorithm, logs; then resume."""
        cfg = self.config
        torch.manual_seed(cfg.train.seed)
        # Data before the model: a bad file or loader option fails before minutes of loading.
        self.sampler = ProblemSampler(
            self._problems(), cfg.rollout.questions_per_step, cfg.train.seed, cfg.data.shuffle
        )
        self.device = torch.device(self.dist.device(cfg.model.device))
        self.model = self._load_policy(str(self.device))
        rollout_dtype = None if cfg.rollout.dtype == "auto" else DTYPES[cfg.rollout.dtype]
        self.generator = TransformersGenerator(
            self.model,
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
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.updater = self._updater()
        self._algorithm()
        self.step = 0
        resumed = self._resume() if resume else False
        self._logs(resume_step=self.step if resumed else None)
        self._stop_requested = False
        self.stop_signal: int | None = None

    def _problems(self) -> list[Any]:
        """The training problems: one benchmark or a mix, the first data.limit of them."""
        data = self.config.data
        problems = (
            load_mix([MixPart.from_dict(part) for part in data.mix], data.data_dir)
            if data.mix
            else load_benchmark(data.benchmark, data.split, data.data_dir, **data.options)
        )
        return problems if data.limit is None else problems[: data.limit]

    def _updater(self) -> Updater:
        """AdamW over the trainable parameters and its learning-rate schedule, one optimizer
        update per mini-batch and epoch."""
        cfg, algo = self.config, self.config.algorithm
        optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg.optim.lr,
            betas=(cfg.optim.beta1, cfg.optim.beta2),
            weight_decay=cfg.optim.weight_decay,
        )
        updates = cfg.train.max_steps * algo.minibatches * algo.num_iterations
        scheduler = _schedule(optimizer, cfg.optim.schedule, cfg.optim.warmup_ratio, updates)
        return Updater(
            self.params,
            optimizer,
            scheduler,
            self.dist,
            cfg.optim.max_grad_norm,
            step=lambda: self.step + 1,
            hint=self._divergence_hint,
        )

    def _algorithm(self) -> None:
        """What the algorithm options make: the estimator and its settings, the loss settings,
        AMIR's pair settings and AdaptiveLambda (None without AMIR), the reference policy."""
        algo = self.config.algorithm
        self.estimator = get_advantage_estimator(algo.advantage)
        self.advantage_settings = algo.advantage_settings(
            algo.scale_rewards, algo.advantage_std, algo.advantage_eps
        )
        self.loss_settings = LossSettings(
            eps_low=algo.eps_low,
            eps_high=algo.eps_high,
            ratio_level=algo.loss_level,
            aggregation=algo.aggregation,
            kl_coef=algo.kl_coef,
            max_completion_length=self.config.rollout.max_new_tokens,
        )
        self.pair_settings = algo.pair_settings()
        self.lambda_reg = algo.adaptive_lambda()
        self.pairless = PairlessWarning(algo.margin, "algorithm.margin") if algo.amir else None
        self.needs_reference = algo.kl_coef > 0 or (algo.amir and not algo.ref_free)
        # A per-group estimator that needs logp_old gets each micro-batch's targets from that
        # micro-batch's training pass (module docstring); AMIR's pair count and later
        # mini-batches need every row's logp_old before the first update.
        self._per_micro_batch = (
            self.estimator.needs_rollout_logp
            and self.estimator.per_group
            and not algo.amir
            and algo.minibatches == 1
        )

    def _logs(self, resume_step: int | None) -> None:
        """metrics.jsonl (and rollouts.jsonl, heldout.jsonl): rank 0 writes, the others hold silent
        logs."""
        cfg, main = self.config, self.dist.is_main
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
            _enable_gradient_checkpointing(model, cfg.model.lora)
        return model

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
        """One step: rollout -> score -> targets -> updates (mini-batches x epochs).

        Returns (metrics, samples): the step's metrics.jsonl line and its rollouts.jsonl line.
        """
        t_start = time.perf_counter()
        problems = self.sampler.batch(self.step)
        questions = self.dist.question_shard(len(problems), self.config.algorithm.minibatches)
        rollouts = self._rollout(problems, questions)
        t_generated = time.perf_counter()
        batch = self._score(problems, questions, rollouts)
        t_scored = time.perf_counter()
        learned = self.learn(batch)
        seconds = (t_start, t_generated, t_scored, time.perf_counter())
        tokens = int(self.dist.sum([int(rollouts.completion_mask.sum())])[0])
        step = self.step + 1
        metrics = step_metrics(
            step, self.sampler.epoch(step), len(problems), batch, learned, tokens, seconds
        )
        return metrics, step_samples(step, problems, batch, learned)

    def learn(self, batch: ScoredBatch) -> Learned:
        """The batch's targets, then its updates: for each epoch, one optimizer update per
        mini-batch. Returns the whole batch's targets and each update's metrics."""
        algo = self.config.algorithm
        minibatches = self._minibatches(len(batch.rollouts))
        old = self._rollout_logprobs(batch.rollouts, minibatches)
        targets = self._batch_targets(batch, old)
        if self.pairless is not None:
            self.pairless.observe(targets, self.config.rollout.group_size)
        updates, first = [], []
        for epoch in range(algo.num_iterations):
            for m, rows in enumerate(minibatches):
                plan = self._plan(
                    batch, targets, rows, on_policy=epoch == m == 0, first_use=epoch == 0
                )
                metrics, computed = self._update(batch, targets, old, plan)
                updates.append(metrics)
                first = first or computed
        # per micro-batch (one mini-batch), the first update's micro-batches hold every row
        return Learned(targets if targets is not None else self._gather(batch, first), updates)

    # -----------------------------------------------------------------------------------------
    # Rollout, score, targets

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

    def _score(self, problems: list[Any], questions: list[int], rollouts: Rollouts) -> ScoredBatch:
        """Rewards of this process's completions, then the whole batch's, in question order."""
        group_size = self.config.rollout.group_size
        golds = [problems[q].answer for q in questions for _ in range(group_size)]
        scores = self.rewards.score(rollouts.texts, golds)
        offsets = torch.arange(group_size)
        rows = (torch.tensor(questions).unsqueeze(1) * group_size + offsets).reshape(-1)
        parts = self.dist.gather((rows, scores, rollouts.texts, rollouts.truncated))
        order = torch.argsort(torch.cat([part[0] for part in parts]))
        texts = [text for part in parts for text in part[2]]
        return ScoredBatch(
            rollouts=rollouts,
            rows=rows,
            scores=take_scores(concat_scores([part[1] for part in parts]), order),
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

    def _batch_targets(self, batch: ScoredBatch, old: RolloutLogprobs) -> GroupTargets | None:
        """The whole batch's advantages and AMIR pairs (docs/algorithms.md §1-3); None when each
        micro-batch computes its own targets from its training pass (module docstring).
        AMIR's coefficients come later, per micro-batch (_micro_targets)."""
        if self._per_micro_batch:
            return None
        mean_logp_old = lengths = None
        if self.estimator.needs_rollout_logp:
            mask = batch.rollouts.completion_mask.bool()
            mean_logp_old = self._to_batch(
                batch.rows, sequence_mean_logp(old.of(slice(None)), mask)
            )
            lengths = self._to_batch(batch.rows, mask.sum(dim=1).float())
        rewards = batch.group_rewards(
            slice(None),
            self.config.rollout.group_size,
            self._correctness(batch),
            mean_logp_old,
            lengths,
        )
        return group_targets(
            rewards, self.estimator, self.advantage_settings, self.pair_settings, coefficients=False
        )

    def _correctness(self, batch: ScoredBatch) -> tuple[torch.Tensor, float]:
        """The correctness component's weighted column [B] and its weighted value on a correct
        answer (what LENS calibrates, docs/algorithms.md §3); zeros and 1.0 when the reward has
        none."""
        scores, component = batch.scores, self.config.reward.correctness_component
        weight = self.rewards.weights.get(component, 0.0)
        column = scores.columns.get(component, torch.zeros_like(scores.total))
        return weight * column.float(), weight * correct_value(component) if weight else 1.0

    # -----------------------------------------------------------------------------------------
    # One update

    def _plan(
        self,
        batch: ScoredBatch,
        targets: GroupTargets | None,
        rows: slice,
        on_policy: bool,
        first_use: bool,
    ) -> UpdatePlan:
        """An update's place in the step, with its global row, token and pair counts."""
        mask = batch.rollouts.completion_mask[rows]
        pairs = 0 if targets is None else targets.select(batch.rows[rows]).num_pairs
        totals = self.dist.sum([rows.stop - rows.start, int(mask.sum()), pairs])
        return UpdatePlan(rows, on_policy, first_use, tuple(int(t) for t in totals))

    def _update(
        self,
        batch: ScoredBatch,
        targets: GroupTargets | None,
        old: RolloutLogprobs,
        plan: UpdatePlan,
    ) -> tuple[dict[str, float], list[tuple[slice, GroupTargets]]]:
        """One optimizer update on this process's rows of one mini-batch (and the other
        processes' rows of it). Returns its metrics and each micro-batch's targets."""
        probes = self._probes()
        computed = []

        def losses() -> Iterator[MicroBatchLoss]:
            for micro in self._micro_batches(plan.rows):
                loss, micro_targets = self._micro_batch_loss(
                    batch, targets, old, micro, plan, probes
                )
                computed.append((micro, micro_targets))
                yield loss

        metrics = self.updater.update(losses(), probes)
        metrics["pairs"] = plan.totals[2]
        if self.lambda_reg is not None:
            metrics["lambda"] = self.lambda_reg.value
        return metrics, computed

    def _probes(self) -> list[GradientProbe]:
        """This update's gradient probes (train/probes.py): the AMIR term's gradient when lambda
        is measured by gradients this step; the all-wrong rows' with the LENS diagnostic."""
        probes: list[GradientProbe] = []
        if self.lambda_reg is not None and self.lambda_reg.measures_gradient(self.step):
            probes.append(PreferenceGradient(self.params, self.lambda_reg))
        if self.config.train.log_all_wrong_gradient:
            probes.append(AllWrongGradient(self.params))
        return probes

    def _micro_batch_loss(
        self,
        batch: ScoredBatch,
        targets: GroupTargets | None,
        old: RolloutLogprobs,
        micro: slice,
        plan: UpdatePlan,
        probes: list[GradientProbe],
    ) -> tuple[MicroBatchLoss, GroupTargets]:
        """A micro-batch's forward passes, targets and loss terms (groupwise.algorithms):
        share * L_GRPO + lambda * the AMIR term, the probes given their parts."""
        algo = self.config.algorithm
        rows, tokens, pairs = plan.totals
        mask = batch.rollouts.completion_mask[micro].bool().to(self.device)
        ref_logp = self._reference_logprobs(batch.rollouts, micro)
        logp = self._logprobs(self.model, batch.rollouts, micro)
        if plan.on_policy:
            old.record(micro, logp)
        mine = self._micro_targets(batch, targets, old, micro, ref_logp, pairs)
        inputs = LossInputs(
            logp,
            mask,
            mine.advantages.to(logp.device),
            old_logp=None if plan.on_policy else old.of(micro).to(logp.device),
            ref_logp=ref_logp,
        )
        coefficients = None if mine.coefficients is None else mine.coefficients.to(logp.device)
        terms = inputs.terms(self.loss_settings, coefficients)
        share = micro_batch_share(
            algo.aggregation, micro.stop - micro.start, int(mask.sum()), rows, tokens
        )
        policy_and_kl = terms.grpo(algo.kl_coef)
        if self.lambda_reg is not None and plan.first_use:
            self._observe_losses(float(policy_and_kl.detach()) * share, share, mine)
        loss = share * policy_and_kl + self._preference_part(terms, probes)
        self._probe_all_wrong(batch, micro, inputs, plan, probes)
        metrics = micro_batch_metrics(terms, mine, share, int(mask.sum()) / tokens)
        return MicroBatchLoss(loss, metrics), mine

    def _micro_targets(
        self,
        batch: ScoredBatch,
        targets: GroupTargets | None,
        old: RolloutLogprobs,
        micro: slice,
        ref_logp: torch.Tensor | None,
        update_pairs: int,
    ) -> GroupTargets:
        """The micro-batch's targets: its rows of the batch's, with AMIR's coefficients from
        its rows' l_old and the update's pair count (docs/algorithms.md §2); or, per micro-batch
        (targets None), the estimator on its own groups and l_old."""
        mask = batch.rollouts.completion_mask[micro].bool()
        mean_logp_old = None
        if targets is None or self.pair_settings is not None:
            mean_logp_old = sequence_mean_logp(old.of(micro), mask)
        if targets is None:
            rewards = batch.group_rewards(
                batch.rows[micro],
                self.config.rollout.group_size,
                self._correctness(batch),
                mean_logp_old,
                mask.sum(dim=1).float(),
            )
            return group_targets(rewards, self.estimator, self.advantage_settings)
        mine = targets.select(batch.rows[micro])
        if self.pair_settings is None:
            return mine
        ref = None if self.config.algorithm.ref_free else sequence_mean_logp(ref_logp.cpu(), mask)
        return mine.with_coefficients(
            mean_logp_old, ref, self.pair_settings.beta, num_pairs=update_pairs
        )

    def _preference_part(self, terms: LossTerms, probes: list[GradientProbe]) -> Any:
        """lambda * the AMIR term, to add to the micro-batch's loss; or, when lambda is measured
        by gradients this step, 0, with the term's gradient kept apart by its probe."""
        if terms.preference is None:
            return 0.0
        for probe in probes:
            if isinstance(probe, PreferenceGradient):
                probe.add(terms.preference)
                return 0.0
        return self.lambda_reg.value * terms.preference

    def _probe_all_wrong(
        self,
        batch: ScoredBatch,
        micro: slice,
        inputs: LossInputs,
        plan: UpdatePlan,
        probes: list[GradientProbe],
    ) -> None:
        """train.log_all_wrong_gradient: the gradient of the all-wrong rows' part of the
        micro-batch's share * L_GRPO, kept by its probe. A micro-batch's aggregated loss splits
        exactly into row subsets, each weighted by its own share of the update
        (micro_batch_share), so this is their exact contribution (docs/algorithms.md §1 and §3)."""
        probe = next((p for p in probes if isinstance(p, AllWrongGradient)), None)
        if probe is None:
            return
        algo, group_size = self.config.algorithm, self.config.rollout.group_size
        all_wrong = group_types(batch.scores.correct, group_size)["all_wrong"]
        wrong = all_wrong.repeat_interleave(group_size)[batch.rows[micro]].to(self.device)
        if not bool((inputs.advantages[wrong] != 0).any()) and algo.kl_coef == 0:
            return  # no such rows, or all their advantages are 0: a zero gradient, no backward
        part = inputs.rows(wrong)
        rows, tokens, _ = plan.totals
        share = micro_batch_share(
            algo.aggregation, int(wrong.sum()), int(part.mask.sum()), rows, tokens
        )
        probe.add(share * part.terms(self.loss_settings).grpo(algo.kl_coef))

    def _observe_losses(self, weighted_pg: float, share: float, mine: GroupTargets) -> None:
        """One loss computation for AdaptiveLambda: the k-th micro-batches of every process,
        L_GRPO pooled by their shares and L_pref by their pairs, so that every process applies
        the same update (none where no process has a pair)."""
        pg_sum, share_sum, pref_sum, pairs = self.dist.sum(
            [weighted_pg, share, float(mine.pair_losses.sum()), mine.num_pairs]
        )
        if pairs > 0:
            self.lambda_reg.observe_losses(pg_sum / share_sum, pref_sum / pairs)

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
        sampling temperature, docs/algorithms.md §1); each group's prompt runs once."""
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

    def _to_batch(self, rows: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """Every process's [b] values placed at their rows of the whole batch: [B]."""
        parts = self.dist.gather((rows, local.cpu()))
        rows_all = torch.cat([part[0] for part in parts])
        out = torch.zeros(rows_all.numel(), dtype=local.dtype)
        out[rows_all] = torch.cat([part[1] for part in parts])
        return out

    def _gather(self, batch: ScoredBatch, parts: list[tuple[slice, GroupTargets]]) -> GroupTargets:
        """The whole batch's targets from the micro-batches' own (this process's rows, in
        order), gathered over processes (per-micro-batch targets have no AMIR pairs)."""
        local = [
            torch.cat([t.advantages for _, t in parts]),
            torch.cat([t.rewards for _, t in parts]),
        ]
        empty = torch.zeros(0, dtype=torch.long)
        return GroupTargets(
            self._to_batch(batch.rows, local[0]), self._to_batch(batch.rows, local[1]), empty, empty
        )

    # -----------------------------------------------------------------------------------------
    # Checkpoints, resume, export

    def _state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "optimizer": self.updater.optimizer.state_dict(),
            "scheduler": self.updater.scheduler.state_dict(),
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
        self.updater.optimizer.load_state_dict(state["optimizer"])
        self.updater.scheduler.load_state_dict(state["scheduler"])
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


def _enable_gradient_checkpointing(model: torch.nn.Module, lora: bool) -> None:
    """Recompute activations in the backward pass, in train mode with dropout at 0."""
    # transformers >= 5.24 names it activation_checkpointing_enable (the old name warns)
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)()
    if lora:
        model.enable_input_require_grads()
    # transformers checkpoints layers only in training mode: train mode, dropout at 0.
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.train()
