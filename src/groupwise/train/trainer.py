"""The training loop for GRPO, AMIR-GRPO, LENS and GSPO (and AMIR-GRPO + LENS).

One step, top to bottom (`Trainer.train_step`):

    questions -> rollouts -> reward columns -> advantages (+ AMIR pairs)
              -> micro-batched loss  policy + gamma * KL + lambda * preference
              -> AdamW step (cosine schedule with warmup, grad-norm clipping)

Forward passes (no wasted ones): the policy pass of each micro-batch gives the token log-probs
of the clipped surrogate, the length-normalised l(q, o) of the AMIR preference term (REFERENCE.md
2) and, detached, the LENS confidences pbar (REFERENCE.md 3). With num_iterations > 1 the log-probs
of the first iteration (no update has happened yet inside it) are kept as logp_old for the later
ones, so logp_old never costs a pass of its own. A reference pass (adapter disabled) runs only
when the KL term or AMIR with a reference needs it.

Micro-batches hold whole groups: advantages, LENS difficulty and AMIR pairs are all computed
within a group, so a micro-batch can compute them itself from its own forward pass, and the
pooled means of the full batch are recovered by weighting each micro-batch's loss by its share.
Each group's prompt runs through the model once, its key/value cache shared by the group's
completions (groupwise.scoring); generation runs on a merged (optionally bfloat16) inference
copy of the policy (groupwise.rollout), so the decode loop pays no adapter matmuls.

Several processes (torchrun / accelerate launch; groupwise.train.distributed): each takes its
own questions of the step, so groups never straddle processes; every share above is taken of
the GLOBAL batch (completions, tokens, pairs), so summing the processes' gradients (one
all-reduce before clipping) gives the gradient of the whole batch, and the k-th micro-batches
of all processes feed AdaptiveLambda together, so lambda is the same everywhere. Rank 0 writes
the logs, checkpoints and the final model.
"""

from __future__ import annotations

import importlib
import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from groupwise.algorithms import (
    AdaptiveLambda,
    aggregate_token_losses,
    group_advantages,
    group_types,
    kl_k3,
    lens_advantages_from_rewards,
    lens_rewards,
    mine_pairs,
    policy_loss,
    preference_loss,
    sequence_mean_logp,
)
from groupwise.data import load_benchmark, render_prompt
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
    latest_checkpoint,
    load_trainer_state,
    load_weights_into,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from groupwise.train.config import Config, save_config
from groupwise.train.distributed import Distributed
from groupwise.train.metrics_log import JsonlLog, MetricsLog
from groupwise.train.sampler import ProblemSampler

# Loss metrics summed over micro-batches (and processes); each is a share of a global count.
_SUMMED = (
    "policy_loss",
    "kl",
    "preference_loss_sum",
    "pairs",
    "pair_logp_margin_sum",
    "clip_fraction_low",
    "clip_fraction_high",
    "clip_fraction",
    "ratio_mean",
)


@dataclass
class GroupSignals:
    """What the loss needs from the rewards of some whole groups (rows local to the slice).

    advantages: [b] one per completion. rewards: [b] the totals the advantages and pairs were
    computed from (LENS-calibrated when LENS is on). chosen, rejected: [P] AMIR pair rows.
    """

    advantages: torch.Tensor
    rewards: torch.Tensor
    chosen: torch.Tensor
    rejected: torch.Tensor


class Trainer:
    """Owns the model, optimizer, schedule, AdaptiveLambda and the run folder."""

    def __init__(self, config: Config, resume: bool = False):
        self.config = config
        cfg = config
        self.dist = Distributed()
        if cfg.rollout.questions_per_step % self.dist.world_size:
            raise ValueError(
                f"rollout.questions_per_step={cfg.rollout.questions_per_step} must be divisible "
                f"by the number of processes ({self.dist.world_size}): each process takes whole "
                "groups"
            )
        self.run_dir = Path(cfg.train.output_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.train.seed)

        device = self.dist.device(cfg.model.device)
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
            model.gradient_checkpointing_enable()
            if cfg.model.lora:
                model.enable_input_require_grads()
            # transformers checkpoints layers only in training mode: train mode, dropout at 0.
            for module in model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
            model.train()
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
            cfg.reward.weights, workers=cfg.reward.workers, timeout=cfg.reward.timeout
        )

        problems = load_benchmark(
            cfg.data.benchmark, split=cfg.data.split, data_dir=cfg.data.data_dir, **cfg.data.options
        )
        if cfg.data.limit is not None:
            problems = problems[: cfg.data.limit]
        self.sampler = ProblemSampler(
            problems, cfg.rollout.questions_per_step, cfg.train.seed, cfg.data.shuffle
        )

        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg.optim.lr,
            betas=(cfg.optim.beta1, cfg.optim.beta2),
            weight_decay=cfg.optim.weight_decay,
        )
        updates = cfg.train.max_steps * cfg.algorithm.num_iterations
        self.scheduler = _schedule(
            self.optimizer, cfg.optim.schedule, cfg.optim.warmup_ratio, updates
        )
        algo = cfg.algorithm
        self.lambda_reg = AdaptiveLambda(
            init=algo.lambda_init,
            low=algo.lambda_low,
            high=algo.lambda_high,
            up=algo.lambda_up,
            down=algo.lambda_down,
            min_value=algo.lambda_min,
            max_value=algo.lambda_max,
        )
        self.needs_reference = algo.kl_coef > 0 or (algo.amir and not algo.ref_free)
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
        if main:
            save_config(cfg, self.run_dir / "config.yaml")
        self._stop_requested = False

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
        with self._graceful_stop():
            while self.step < cfg.train.max_steps and not self._stop_requested:
                record, samples = self.train_step()
                self.step += 1
                # A signal may reach one process only; all stop after the same step.
                self._stop_requested = self.dist.any(self._stop_requested)
                self.log.write(record)
                if self.rollout_log is not None:
                    self.rollout_log.write(samples)
                bar.update(1)
                bar.set_postfix(
                    reward=f"{record['reward_mean']:.3f}",
                    acc=f"{record['accuracy']:.2f}",
                    lam=f"{record['lambda']:.4f}",
                    tok_s=f"{record['tokens_per_second']:.0f}",
                )
                if self.step % cfg.train.save_every == 0 or self.step == cfg.train.max_steps:
                    self.save()
            if self._stop_requested and self.step < cfg.train.max_steps:
                self.save()
                bar.write(f"stopped at step {self.step}; resume with --resume")
        bar.close()
        self.log.close()
        if self.rollout_log is not None:
            self.rollout_log.close()
        final = self.export() if self.step >= cfg.train.max_steps else self.run_dir
        self.dist.close()
        return final

    def train_step(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """One step: rollout -> score -> advantages -> loss -> update.

        Returns (metrics, samples): the step's metrics.jsonl line and its rollouts.jsonl line.
        """
        cfg = self.config
        t_start = time.perf_counter()

        group_size = cfg.rollout.group_size
        problems = self.sampler.batch(self.step)
        mine = self.dist.shard(problems)  # this process's questions (all of them in one)
        prompts = [render_prompt(p, cfg.data.prompt, self.tokenizer) for p in problems[mine]]
        sampling = SamplingParams(
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
            max_new_tokens=cfg.rollout.max_new_tokens,
        )
        # One random stream per question, keyed by its data position: the same samples
        # whichever process draws them.
        position = self.step * cfg.rollout.questions_per_step + mine.start
        seeds = [cfg.train.seed * 1_000_003 + position + i for i in range(len(prompts))]
        rollouts = self.generator.generate(prompts, group_size, sampling, prompt_seeds=seeds)
        t_generated = time.perf_counter()

        local_golds = [p.answer for p in problems[mine] for _ in range(group_size)]
        local_scores = self.rewards.score(rollouts.texts, local_golds)
        # Advantages, pairs and metrics are taken over the whole batch of every process.
        gathered = self.dist.gather((local_scores, rollouts.texts, rollouts.truncated))
        scores = _concat_scores([g[0] for g in gathered])
        texts = [text for g in gathered for text in g[1]]
        truncated = torch.cat([g[2] for g in gathered])
        t_scored = time.perf_counter()

        update, signals = self._optimize(rollouts, scores)
        t_trained = time.perf_counter()

        tokens = int(self.dist.sum([int(rollouts.completion_mask.sum())])[0])
        golds = [p.answer for p in problems for _ in range(group_size)]
        samples = {
            "step": self.step + 1,
            "problem_ids": [p.id for p in problems],
            "completions": texts,
            "golds": golds,
            "correct": scores.correct.tolist(),
            "reward_columns": {k: v.tolist() for k, v in scores.columns.items()},
            "rewards": signals.rewards.tolist(),
            "advantages": signals.advantages.tolist(),
            "pairs": [signals.chosen.tolist(), signals.rejected.tolist()],
        }
        metrics = {
            "step": self.step + 1,
            "epoch": self.sampler.epoch(self.step + 1),
            **_reward_metrics(scores, group_size),
            **update,
            "completion_length_mean": tokens / len(texts),
            "truncated_fraction": float(truncated.float().mean()),
            "completion_tokens": tokens,
            "seconds_generation": t_generated - t_start,
            "seconds_scoring": t_scored - t_generated,
            "seconds_training": t_trained - t_scored,
            "seconds_step": t_trained - t_start,
            "tokens_per_second": tokens / max(t_trained - t_start, 1e-9),
        }
        return metrics, samples

    # -----------------------------------------------------------------------------------------
    # Advantages and pairs

    def group_signals(
        self, scores: Scores, rows: slice, mean_logp_old: torch.Tensor | None
    ) -> GroupSignals:
        """Advantages and AMIR pairs for the whole groups in `rows` (REFERENCE.md 1-3).

        mean_logp_old: [b] length-normalised log-probs under the rollout policy, needed by LENS
        (pbar = exp of it); ignored otherwise.
        """
        algo = self.config.algorithm
        group_size = self.config.rollout.group_size
        total = scores.total[rows].float()
        correct = scores.correct[rows]
        if algo.advantage == "lens":
            rt = lens_rewards(correct, mean_logp_old, group_size)
            component = self.config.reward.correctness_component
            weight = self.rewards.weights[component]
            column = scores.columns[component][rows].float()
            # The calibrated correctness replaces the correctness component inside the weighted
            # sum (REFERENCE.md "AMIR-GRPO + LENS together"); with the binary reward alone this
            # is exactly rt. Correct completions keep their reward: rt = 1 there.
            calibrated = total + weight * (correct_value(component) * rt - column)
            calibrated = torch.where(correct, total, calibrated)
            advantages = lens_advantages_from_rewards(
                calibrated,
                total,
                correct,
                group_size,
                alpha=algo.lens_alpha,
                mode=algo.lens_mode,
                eps=algo.advantage_eps,
            )
            total = calibrated
        else:
            advantages = group_advantages(
                total, group_size, scale=algo.scale_rewards, eps=algo.advantage_eps
            )
        if algo.amir:
            chosen, rejected = mine_pairs(
                total,
                group_size,
                algo.margin,
                mode=algo.pair_mode,
                max_pairs_per_group=algo.max_pairs_per_group,
            )
        else:
            chosen = rejected = torch.zeros(0, dtype=torch.long)
        return GroupSignals(advantages, total, chosen, rejected)

    # -----------------------------------------------------------------------------------------
    # Loss and update

    def _micro_batches(self, batch_size: int) -> list[slice]:
        group_size = self.config.rollout.group_size
        per = max(group_size, self.config.train.micro_batch_size // group_size * group_size)
        return [slice(s, min(s + per, batch_size)) for s in range(0, batch_size, per)]

    def _optimize(self, rollouts: Rollouts, scores: Scores) -> tuple[dict[str, Any], GroupSignals]:
        """num_iterations optimizer updates on one rollout batch.

        rollouts: this process's completions; scores: those of the whole batch (every
        process's, in rank order). Returns the loss metrics and the whole batch's signals
        (advantages, rewards used, pairs).
        """
        cfg = self.config
        algo = cfg.algorithm
        group_size = cfg.rollout.group_size
        local_size = len(rollouts.texts)
        batch_size = local_size * self.dist.world_size
        offset = self.dist.rank * local_size  # row of this process's first completion
        micro = self._micro_batches(local_size)
        mask_all = rollouts.completion_mask.bool()
        tokens_total = self.dist.sum([int(mask_all.sum())])[0]
        max_len = cfg.rollout.max_new_tokens

        # Signals that need no log-probs are computed once for the whole batch; LENS needs the
        # rollout policy's confidences, which the first forward pass of each micro-batch gives.
        upfront = (
            None if algo.advantage == "lens" else self.group_signals(scores, slice(None), None)
        )
        pairs_total = int(upfront.chosen.numel()) if upfront is not None else None
        mine = (
            _slice_signals(upfront, slice(offset, offset + local_size), batch_size)
            if upfront is not None
            else None
        )
        signals: list[GroupSignals | None] = [None] * len(micro)
        old_logps: list[torch.Tensor | None] = [None] * len(micro)
        sums: dict[str, float] = {}
        grad_norms = []

        measure_grad = (
            algo.amir and algo.lambda_measure == "grad" and self.step % algo.lambda_every == 0
        )
        for iteration in range(algo.num_iterations):
            pref_grads = [torch.zeros_like(p) for p in self.params] if measure_grad else None
            for k, rows in enumerate(micro):
                mask = mask_all[rows].to(self.device)
                # Rows hold whole groups: their prompts are rows start/G .. stop/G, each run
                # once for its G completions.
                prompts = slice(rows.start // group_size, rows.stop // group_size)
                inputs = (
                    rollouts.prompt_ids[prompts].to(self.device),
                    rollouts.prompt_mask[prompts].to(self.device),
                    rollouts.completion_ids[rows].to(self.device),
                    rollouts.completion_mask[rows].to(self.device),
                )
                score = partial(
                    completion_logprobs,
                    temperature=cfg.rollout.temperature,
                    group_size=group_size,
                )
                ref_logp = None
                if self.needs_reference:
                    with torch.no_grad(), reference_policy(self.model):
                        ref_logp = score(self.model, *inputs)
                logp = score(self.model, *inputs)
                mean_logp = sequence_mean_logp(logp, mask)
                if iteration == 0:
                    old_logps[k] = logp.detach()
                    signals[k] = (
                        _slice_signals(mine, rows, local_size)
                        if mine is not None
                        else self.group_signals(
                            scores,
                            slice(offset + rows.start, offset + rows.stop),
                            mean_logp.detach().cpu(),
                        )
                    )
                sig = signals[k]
                old = None if iteration == 0 else old_logps[k]

                pg, clip = policy_loss(
                    logp,
                    old,
                    sig.advantages.to(logp.device),
                    mask,
                    eps_low=algo.eps_low,
                    eps_high=algo.eps_high,
                    level=algo.loss_level,
                    aggregation=algo.aggregation,
                    max_completion_length=max_len,
                )
                grpo = pg
                kl = None
                if algo.kl_coef > 0:
                    kl = aggregate_token_losses(
                        kl_k3(logp, ref_logp), mask, algo.aggregation, max_completion_length=max_len
                    )
                    grpo = pg + algo.kl_coef * kl
                # Share of this micro-batch in the batch-level mean of each aggregation.
                rows_n = mask.shape[0]
                share = (
                    int(mask.sum()) / tokens_total
                    if algo.aggregation == "dapo"
                    else rows_n / batch_size
                )
                loss = share * grpo

                pref = None
                n_pairs = int(sig.chosen.numel())
                if algo.amir and n_pairs > 0:
                    ref_mean = None if algo.ref_free else sequence_mean_logp(ref_logp, mask)
                    pref = preference_loss(
                        mean_logp,
                        ref_mean,
                        sig.chosen.to(logp.device),
                        sig.rejected.to(logp.device),
                        algo.beta_dpo,
                    )
                if algo.amir and algo.lambda_measure == "loss" and iteration == 0:
                    # Official rule: on each loss computation, before combining.
                    self._update_lambda_from_losses(grpo, share, pref, n_pairs)
                if pref is not None:
                    # Pooled over all pairs of the batch. With LENS the pairs of a micro-batch
                    # exist only after its forward pass, so there they are pooled per
                    # micro-batch, as the official code does (its minibatch is the micro-batch);
                    # a micro_batch_size that holds the whole batch pools over the batch.
                    pair_share = (
                        rows_n / batch_size if pairs_total is None else n_pairs / pairs_total
                    )
                    if measure_grad and iteration == 0:
                        grads = torch.autograd.grad(
                            pair_share * pref, self.params, retain_graph=True, allow_unused=True
                        )
                        for buf, g in zip(pref_grads, grads, strict=True):
                            if g is not None:
                                buf.add_(g)
                    else:
                        loss = loss + self.lambda_reg.value * pair_share * pref
                loss.backward()

                _accumulate(sums, "policy_loss", share * float(pg.detach()))
                for name, value in clip.items():
                    _accumulate(sums, name, float(value) * int(mask.sum()) / tokens_total)
                if kl is not None:
                    _accumulate(sums, "kl", share * float(kl.detach()))
                if pref is not None:
                    _accumulate(sums, "preference_loss_sum", float(pref.detach()) * n_pairs)
                    _accumulate(sums, "pairs", n_pairs)
                    with torch.no_grad():
                        margin = mean_logp[sig.chosen] - mean_logp[sig.rejected]
                    _accumulate(sums, "pair_logp_margin_sum", float(margin.sum()))

            self.dist.sum_gradients(self.params, pref_grads or [])
            if measure_grad and iteration == 0:
                self._apply_grad_measured_lambda(pref_grads)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.optim.max_grad_norm)
            grad_norms.append(float(grad_norm))
            lr = self.scheduler.get_last_lr()[0]
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)

        # Every process's sums (shares of global counts) add up to the batch's values.
        sums = dict(zip(_SUMMED, self.dist.sum([sums.get(k, 0.0) for k in _SUMMED]), strict=True))
        parts = self.dist.gather(_concat_signals(signals))
        all_signals = _concat_signals(parts)
        pairs = sums["pairs"]
        num_groups = batch_size // group_size
        metrics = {
            "policy_loss": sums["policy_loss"] / algo.num_iterations,
            "kl": sums["kl"] / algo.num_iterations,
            "preference_loss": sums["preference_loss_sum"] / pairs if pairs else 0.0,
            "pair_logp_margin": sums["pair_logp_margin_sum"] / pairs if pairs else 0.0,
            "pairs": int(all_signals.chosen.numel()),
            "pairs_per_group": all_signals.chosen.numel() / num_groups,
            "lambda": self.lambda_reg.value,
            "advantage_abs_mean": float(all_signals.advantages.abs().mean()),
            "reward_used_mean": float(all_signals.rewards.mean()),
            # Mean over the num_iterations updates (pre-clipping norms), as the losses.
            "grad_norm": sum(grad_norms) / len(grad_norms),
            "learning_rate": lr,
        }
        for name in ("clip_fraction_low", "clip_fraction_high", "clip_fraction", "ratio_mean"):
            metrics[name] = sums[name] / algo.num_iterations
        return metrics, all_signals

    def _update_lambda_from_losses(
        self, grpo: torch.Tensor, share: float, pref: torch.Tensor | None, n_pairs: int
    ) -> None:
        """lambda_measure=loss (REFERENCE.md 2): one update from this loss computation's L_GRPO
        and L_pref, none when it has no pair. With several processes, the k-th micro-batches of
        all of them are one loss computation: L_GRPO pooled by their shares of the batch, L_pref
        by their pairs, so every process applies the same update."""
        pref_sum = float(pref.detach()) * n_pairs if pref is not None else 0.0
        grpo_sum, weight, pref_total, pairs = self.dist.sum(
            [float(grpo.detach()) * share, share, pref_sum, n_pairs]
        )
        if pairs > 0:
            self.lambda_reg.update(grpo_sum / weight, pref_total / pairs)

    def _apply_grad_measured_lambda(self, pref_grads: list[torch.Tensor]) -> None:
        """lambda_measure=grad: ratio = ||lambda grad L_pref|| / ||grad L_GRPO||, then combine.

        The GRPO gradient is what the micro-batches accumulated in .grad; the preference
        gradient was kept apart, so the ratio is measured before lambda is applied (REFERENCE.md
        2, "a better-founded measure").
        """
        pg_norm = torch.sqrt(
            sum((p.grad.float() ** 2).sum() for p in self.params if p.grad is not None)
        )
        pref_norm = torch.sqrt(sum((g.float() ** 2).sum() for g in pref_grads))
        if float(pref_norm) > 0:
            ratio = self.lambda_reg.value * float(pref_norm) / max(1e-12, float(pg_norm))
            self.lambda_reg.update_from_ratio(ratio)
        for p, g in zip(self.params, pref_grads, strict=True):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.add_(g, alpha=self.lambda_reg.value)

    # -----------------------------------------------------------------------------------------
    # Checkpoints, resume, export

    def _state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "lambda_reg": self.lambda_reg.state_dict(),
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
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is None:
            return False
        state = load_trainer_state(checkpoint)
        load_weights_into(self.model, checkpoint)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
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
    """The Scores of consecutive slices of a batch (one per process, in rank order) as one."""
    if len(parts) == 1:
        return parts[0]
    return Scores(
        columns={k: torch.cat([p.columns[k] for p in parts]) for k in parts[0].columns},
        weights=parts[0].weights,
        total=torch.cat([p.total for p in parts]),
        correct=torch.cat([p.correct for p in parts]),
        verdicts=[v for p in parts for v in p.verdicts],
    )


def _slice_signals(signals: GroupSignals, rows: slice, batch_size: int) -> GroupSignals:
    """The part of batch-level signals that falls in `rows`, pair indices made local."""
    start, stop, _ = rows.indices(batch_size)
    keep = (signals.chosen >= start) & (signals.chosen < stop)
    return GroupSignals(
        signals.advantages[rows],
        signals.rewards[rows],
        signals.chosen[keep] - start,
        signals.rejected[keep] - start,
    )


def _concat_signals(parts: list[GroupSignals]) -> GroupSignals:
    chosen, rejected, offset = [], [], 0
    for part in parts:
        chosen.append(part.chosen + offset)
        rejected.append(part.rejected + offset)
        offset += part.advantages.numel()
    return GroupSignals(
        torch.cat([p.advantages for p in parts]),
        torch.cat([p.rewards for p in parts]),
        torch.cat(chosen),
        torch.cat(rejected),
    )


def _accumulate(sums: dict[str, float], key: str, value: float) -> None:
    sums[key] = sums.get(key, 0.0) + value
