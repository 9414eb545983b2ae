"""GroupwiseGRPOTrainer: TRL's GRPOTrainer with LENS advantages and the AMIR-GRPO term.

Everything TRL wires in (vLLM colocate and server mode, DeepSpeed, FSDP, accelerate multi-node,
PEFT, its loggers) comes unchanged: the subclass overrides only these GRPOTrainer methods
(compat.HOOKS lists them, with the signatures it was written against):

- `_calculate_rewards`: keeps the [B, F] rewards TRL gathers from every process (TRL sums them
  and forgets the columns; LENS needs the correctness column, AMIR the totals).
- `_generate_and_score_completions`: after TRL's, tags each row with its row of the gathered
  generation batch ("groupwise_rows") and computes over the whole gathered batch, with the
  Algorithm that AlgorithmOptions.build made (on terms.group_rewards), the LENS advantages (in place
  of TRL's) and AMIR's per-completion coefficients c_k = dL_pref/dl_k at the rollout policy
  ("groupwise_coefficients"), each process keeping its rows. TRL then shuffles and splits
  these per-row keys in step with the rows, so a group may straddle micro-batches and
  processes: the coefficients are per completion, which makes any split exact (docs/design.md).
- `_get_per_token_logps_and_entropies`: unchanged, except that while `_compute_loss` runs it
  keeps the policy's per-token log-probs (with gradient; at the sampling temperature, as TRL
  computes them) for the AMIR term, and, when the terms wait for it (below), computes them.
- `_compute_loss`: TRL's loss plus lambda * scale * sum_k c_k l_k(theta) over the micro-batch's
  rows (groupwise.algorithms.preference_surrogate), with scale = processes x
  steps_per_generation / gradient-accumulation steps, so that the gradients TRL accumulates
  and averages over processes add up to lambda * grad L_pref of the generation batch (per
  optimizer step, when a generation batch spans several). The term's value is kept at 0 (its
  gradient is the point), so TRL's logged `loss` stays TRL's GRPO loss.
  With `gmpo=True` TRL's "grpo" loss has its clipped surrogate replaced by groupwise's GMPO
  term (groupwise.algorithms.policy_loss, "gmpo"): TRL's loss - the clipped surrogate + GMPO,
  both aggregated as TRL's "grpo" and divided by the accumulation steps as TRL divides, so
  that TRL's KL and entropy terms stay TRL's (docs/algorithms.md, "GMPO").
- `_save_checkpoint` / `_load_optimizer_and_scheduler`: lambda_reg travels with checkpoints.
With vLLM colocated on a CPU (vLLM's CPU build) the weight sync goes through vLLM's in-place
reload, which TRL's own call cannot do there (vllm_cpu.py).

The rollout policy's log-probs (LENS's confidences, AMIR's l_old; one set, however many of LENS
and AMIR need them) are exactly what TRL's loss uses as its old policy in the importance ratio:
1. TRL's `old_per_token_logps`, where TRL computes it (with vLLM's importance-sampling
   correction, on by default, or when a generation batch spans several optimizer steps);
2. else TRL's loss takes the old policy from its own forward pass (detached): generation is
   aligned with optimizer steps, so that pass runs at the rollout policy. When the generation
   batch is one micro-batch per process (steps_per_generation = 1, TRL's default with no
   gradient accumulation) the terms are computed from that very pass (gathered over processes)
   before TRL's loss reads the advantages: no extra pass;
3. else one no-grad pass of the policy over the generation batch, through TRL's own log-prob
   function (the micro-batches come one after another, and the first one's loss needs every
   row's l_old): the values each micro-batch's forward pass will give TRL's loss.
Sampling log-probs (vLLM's, or a rollout_func's "logprobs") are never used: TRL's loss uses
them only for its importance-sampling weight and off-policy mask, never as the old policy, and
they may be placeholders or, from a vLLM server started without processed log-probs, taken
before temperature. `old_per_token_logps` itself is never written: TRL's ratio stays its own.

Without AMIR and a non-"grpo" estimator the trainer is TRL's GRPOTrainer: nothing is added to
the batch and nothing is logged or warned beyond what TRL does (`log_rollouts=True` adds
OUTPUT_DIR/rollouts.jsonl, one line per generation batch for `groupwise view`: rollout_log.py).

Rows whose reward functions all returned None: TRL leaves them out of its baseline and gives
them advantage 0; groupwise leaves their whole group out (advantages 0 under LENS, no AMIR
pairs; group_targets' `scorable`), since LENS's group statistics need every row's correctness.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
from accelerate.utils import is_peft_model
from torch import Tensor
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.extras.profiling import profiling_context
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import get_config_model_id, use_adapter

from groupwise.algorithms import (
    GroupTargets,
    RewardFacts,
    get_advantage_estimator,
    policy_loss,
    preference_surrogate,
    sequence_mean_logp,
)
from groupwise.integrations.trl.compat import (
    FORWARD_KEYS,
    check_trainer_attributes,
    check_trl_compatibility,
    require_batch_keys,
)
from groupwise.integrations.trl.config import TRL_NAMES, GroupwiseGRPOConfig
from groupwise.integrations.trl.rollout_log import RolloutLog, line_settings
from groupwise.integrations.trl.terms import (
    correct_rows,
    group_fractions,
    group_rewards,
    resolve_correctness,
    scorable_rows,
)
from groupwise.integrations.trl.vllm_cpu import colocate_binding, use_cpu_weight_sync

COEFFICIENTS_KEY = "groupwise_coefficients"
"""Batch-dict key of AMIR's per-completion coefficients c_k ([b] per process)."""

ROWS_KEY = "groupwise_rows"
"""Batch-dict key of each row's index in the gathered generation batch ([b] per process)."""

STATE_FILE = "groupwise_state.json"
"""File in each checkpoint folder that holds lambda_reg."""


@dataclass(frozen=True)
class _GenerationRecord:
    """groupwise's record of one generation batch, from its scoring
    (`_generate_and_score_completions`) to its losses (`_compute_loss`).

    rewards: [B, F] the gathered rewards; ref_mean_logp: [B] the reference l_ref (None when
    reference-free): the inputs of group_targets besides the rollout l(q, o). waiting: its
    terms wait for the first loss forward pass (module docstring, case 2). pref_loss: L_pref
    at the rollout policy, which the first micro-batch's loss hands to the lambda rule (None:
    nothing to hand over, or handed over)."""

    rewards: Tensor
    ref_mean_logp: Tensor | None
    waiting: bool = False
    pref_loss: float | None = None


@dataclass(frozen=True)
class _LossPass:
    """What `_compute_loss` sees of TRL's loss while it runs: the micro-batch's inputs and the
    policy's per-token log-probs [b, T] (with gradient) of TRL's first forward pass in it, None
    until that pass ran."""

    inputs: dict[str, Any]
    logps: Tensor | None = None


def loss_mask(batch: dict[str, Any]) -> Tensor:
    """[b, T] bool: the completion tokens TRL's loss counts (model tokens only, with tools)."""
    mask = batch["completion_mask"]
    if batch.get("tool_mask") is not None:
        mask = mask * batch["tool_mask"]
    return mask.bool()


class GroupwiseGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with groupwise's LENS advantages and AMIR-GRPO preference term.

    Use it as GRPOTrainer, with a GroupwiseGRPOConfig as `args` (module docstring: what it
    overrides and why). Logged through TRL's metrics (so to TensorBoard / W&B / trackio with
    `report_to`), per generation batch: `groups/all_correct`, `groups/all_wrong`, `groups/mixed`
    and `groups/all_wrong_with_gradient` (when the correctness reward is known and binary) and
    with AMIR `amir/pairs`, `amir/preference_loss` (L_pref at the rollout policy),
    `amir/pair_logp_margin`; per optimizer step `amir/lambda`.
    """

    _tag_names: ClassVar[list[str]] = [*GRPOTrainer._tag_names, "groupwise"]

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: GroupwiseGRPOConfig | None = None,
        *more: Any,
        **kwargs: Any,
    ) -> None:
        check_trl_compatibility()
        if args is None:
            name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = GroupwiseGRPOConfig(f"{name.split('/')[-1]}-GroupwiseGRPO")
        elif not isinstance(args, GroupwiseGRPOConfig):
            raise TypeError(
                f"GroupwiseGRPOTrainer needs args=GroupwiseGRPOConfig(...), got "
                f"{type(args).__name__}"
            )
        binding = colocate_binding(args)
        with binding.applied() if binding is not None else nullcontext():
            super().__init__(model, reward_funcs, args, *more, **kwargs)
        # what the colocated engine's cores were set to (groupwise.rollout.vllm_cpu), or None
        self.vllm_cpu_binding = None if binding is None else binding.record()
        if binding is not None:
            print(f"groupwise: {binding.describe()}", file=sys.stderr)
        check_trainer_attributes(self)
        use_cpu_weight_sync(self)  # vLLM colocated on a CPU (vllm_cpu.py); nothing on a GPU
        self._algorithm(args)
        # OUTPUT_DIR/rollouts.jsonl for groupwise view (rollout_log.py), with log_rollouts=True
        self.rollout_log = None
        if args.log_rollouts:
            line = line_settings(self, args.advantage_estimator, args.amir)
            writer = self.is_world_process_zero()
            self.rollout_log = RolloutLog(
                args.output_dir, args.log_rollouts_answer_column, line, writer
            )
        self._gathered_rewards: Tensor | None = None
        # the latest generation batch's record, made when it is scored, read by its losses
        self._generation: _GenerationRecord | None = None
        # set while _compute_loss runs TRL's loss: its forward pass is kept there
        self._loss_pass: _LossPass | None = None
        self._warned_non_binary = False

    def _algorithm(self, args: GroupwiseGRPOConfig) -> None:
        """What the options build (AlgorithmOptions.build: the checks of the correctness
        signal, the margin and the reference policy run there), once the reward functions and
        the model are known."""
        options = args.algorithm_options()
        # "grpo" keeps TRL's own advantages (and its scale_rewards); AMIR still runs on them
        self._own_advantages = options.advantage != "grpo"
        self.uses_groupwise = options.amir or self._own_advantages
        needs_correctness = get_advantage_estimator(options.advantage).needs_correctness
        self._needs_correct = self._own_advantages and needs_correctness
        self.correctness = resolve_correctness(
            self.reward_func_names,
            self.reward_weights,
            args.correctness_reward,
            args.correctness_value,
            required=self._needs_correct,
        )
        has_reference = self.beta != 0.0 or is_peft_model(self.model)
        self.algorithm = options.build(
            self._reward_facts(),
            self.num_generations,
            name=TRL_NAMES.get,
            no_reference=None
            if has_reference
            else "a PEFT model (its adapter disabled is the reference) or beta > 0 (TRL then "
            "loads a reference model)",
            scale=args.scale_rewards,  # with TRL's unbiased std and eps 1e-4 (nanstd)
        )
        if self._needs_correct:
            self._check_correctness_function()
        self.lambda_reg = self.algorithm.lambda_reg
        self._needs_rollout_logp = self.uses_groupwise and self.algorithm.needs_rollout_logp
        # GMPO through the core (TRL has none): its term replaces TRL's clipped surrogate
        self._gmpo = args.gmpo
        self._surrogate = options.surrogate_params(self.epsilon_low, self.epsilon_high)

    def _reward_facts(self) -> RewardFacts:
        """The reward functions' ranges, where known (groupwise's reward_functions declare
        theirs; the correctness reward returns 0 or correctness_value), their weights and the
        correctness reward's contribution, for AlgorithmOptions.build (docs/algorithms.md §2-3)."""
        ranges = []
        for index, func in enumerate(self.reward_funcs):
            bounds = getattr(func, "bounds", None)
            if bounds is None and self.correctness is not None and index == self.correctness.index:
                bounds = (min(0.0, self.correctness.value), max(0.0, self.correctness.value))
            ranges.append(bounds)
        correct_reward = (
            self.correctness.weight * self.correctness.value
            if self.correctness is not None
            else None
        )
        return RewardFacts(
            ranges,
            self.reward_weights.tolist(),
            correct_reward,
            correctness_hint="say which reward function it is: set correctness_reward to one of "
            f"{self.reward_func_names}",
        )

    def _check_correctness_function(self) -> None:
        """LENS needs a reward that returns 0 or correctness_value: refuse, when the trainer is
        built, a groupwise reward function (reward_functions) that does not; any other function
        is checked on its first generation batch (terms.correct_rows)."""
        func = self.reward_funcs[self.correctness.index]
        if not hasattr(func, "correct_value"):
            return
        if func.correct_value is None or func.correct_value != self.correctness.value:
            what = (
                "is not a correctness reward"
                if func.correct_value is None
                else f"returns {func.correct_value:g} for a correct answer"
            )
            raise ValueError(
                f"LENS needs a binary correctness reward: reward function '{self.correctness.name}'"
                f" {what}, but correctness_value={self.correctness.value:g} (set "
                "correctness_reward / correctness_value to a 0-or-value reward function)"
            )

    # -----------------------------------------------------------------------------------------
    # Generation batch: rewards, rollout log-probs, advantages, coefficients

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = rewards
        return rewards

    def _generate_and_score_completions(self, inputs):
        self._gathered_rewards = None
        batch = super()._generate_and_score_completions(inputs)
        if self.model.training and self.rollout_log is not None:
            self.rollout_log.collect(self, inputs, batch, self._gathered_rewards)
            if not self.uses_groupwise:
                self.rollout_log.finish(None)  # TRL's advantages, no pairs
        # evaluation, and training without AMIR and LENS, are TRL's own, untouched
        if not self.model.training or not self.uses_groupwise:
            return batch
        require_batch_keys(batch)
        if self._gathered_rewards is None:
            raise RuntimeError(
                "TRL's _generate_and_score_completions did not call _calculate_rewards; "
                "groupwise.integrations.trl cannot see the rewards (unsupported TRL version?)"
            )
        self._add_groupwise_terms(batch, self._gathered_rewards)
        self._gathered_rewards = None
        return batch

    def _add_groupwise_terms(self, batch: dict[str, Any], rewards: Tensor) -> None:
        """Tag this process's rows with their rows of the gathered batch, then compute the
        batch's terms now, or, when the rollout log-probs must be measured and the generation
        batch is one micro-batch per process, from the first loss forward pass (module
        docstring)."""
        rows = batch["completion_ids"].shape[0]
        start = self.accelerator.process_index * rows
        batch[ROWS_KEY] = torch.arange(start, start + rows, device=batch["completion_ids"].device)
        ref_mean_logp = None
        if self.args.amir and not self.args.amir_ref_free:
            local = sequence_mean_logp(self._reference_logps(batch), loss_mask(batch))
            ref_mean_logp = self._gather_rows(batch, local)
        record = _GenerationRecord(rewards, ref_mean_logp)
        mean_logp = None
        if self._needs_rollout_logp:
            token_logps = batch.get("old_per_token_logps")
            if token_logps is None and self.args.steps_per_generation == 1:
                self._generation = replace(record, waiting=True)
                return
            if token_logps is None:
                with profiling_context(self, "groupwise.rollout_logps"):
                    token_logps = self._no_grad_logps(batch)
            mean_logp = sequence_mean_logp(token_logps, loss_mask(batch))
        self._generation = replace(record, pref_loss=self._finish_terms(batch, record, mean_logp))

    def _finish_terms(
        self, batch: dict[str, Any], record: _GenerationRecord, mean_logp: Tensor | None
    ) -> float | None:
        """The gathered batch's targets (groupwise.algorithms.group_targets) from its rewards
        and the rollout l(q, o) of `batch`'s rows ([b], or None where not needed); the values of
        `batch`'s rows into it; the batch's metrics into TRL's. Returns L_pref at the rollout
        policy for the lambda rule, None where there is none (no AMIR, or no pair)."""
        mean_logp_old = lengths = None
        if mean_logp is not None:
            mean_logp_old = self._gather_rows(batch, mean_logp)
        if mean_logp is not None or self.algorithm.estimator.needs_lengths:
            # LENS's "sequence" difficulty; REINFORCE++-baseline's token-weighted whitening
            lengths = self._gather_rows(batch, loss_mask(batch).sum(dim=1).float())
        with profiling_context(self, "groupwise.group_targets"):
            rewards = group_rewards(
                record.rewards,
                self.reward_weights,
                self.num_generations,
                self.correctness,
                required=self._needs_correct,
                mean_logp_old=mean_logp_old,
                lengths=lengths,
            )
            targets = self.algorithm.targets(
                rewards,
                ref_mean_logp=record.ref_mean_logp,
                scorable=scorable_rows(record.rewards),
            )
        mine = batch[ROWS_KEY]
        if self._own_advantages:
            batch["advantages"] = targets.advantages[mine].to(batch["advantages"])
            logged = self._logs["advantages"]  # the completions table: show the ones used
            for _ in range(targets.advantages.numel()):
                logged.pop()
            logged.extend(targets.advantages.tolist())
        pref_loss = None
        if self.algorithm.pair_settings is not None:
            pref_loss = self._record_pairs(batch, targets)
        self._log_group_types(record.rewards, targets.advantages)
        if self.rollout_log is not None:
            self.rollout_log.finish(targets)
        return pref_loss

    def _record_pairs(self, batch: dict[str, Any], targets: GroupTargets) -> float | None:
        """AMIR's coefficients of this process's rows into the batch; its pair metrics. Returns
        L_pref at the rollout policy, None without a pair."""
        batch[COEFFICIENTS_KEY] = targets.coefficients[batch[ROWS_KEY]]
        pairs = targets.num_pairs
        metrics = self._metrics["train"]
        metrics["amir/pairs"].append(float(pairs))
        metrics["amir/preference_loss"].append(float(targets.pair_losses.mean()) if pairs else 0.0)
        metrics["amir/pair_logp_margin"].append(
            float(targets.logp_margins.mean()) if pairs else 0.0
        )
        self.algorithm.pairless.observe(targets, self.num_generations)
        # the official rule updates lambda only where there are pairs (docs/algorithms.md §2)
        return float(targets.pair_losses.mean()) if pairs else None

    def _log_group_types(self, rewards: Tensor, advantages: Tensor) -> None:
        """groups/* from the correctness reward, when there is one and it is binary (warned
        about once otherwise), and the batch's advantages ([B], group-major)."""
        if self.correctness is None:
            return
        correct = correct_rows(rewards, self.correctness, required=False)
        if correct is not None:
            for key, value in group_fractions(correct, advantages, self.num_generations).items():
                self._metrics["train"][key].append(value)
        elif not self._warned_non_binary:
            self._warned_non_binary = True
            warnings.warn(
                f"reward function '{self.correctness.name}' returned values other than 0 and "
                f"correctness_value={self.correctness.value}: the groups/* metrics are not "
                "logged while it does (this warning is shown once)",
                stacklevel=2,
            )

    def _gather_rows(self, batch: dict[str, Any], local: Tensor) -> Tensor:
        """Every process's [b] values of its rows of `batch` -> [B] in the gathered batch's row
        order (ROWS_KEY), whatever order TRL put the rows in."""
        rows = self.accelerator.gather(batch[ROWS_KEY].contiguous())
        values = self.accelerator.gather(local.contiguous())
        expected = torch.arange(self.accelerator.num_processes * batch[ROWS_KEY].numel())
        if not torch.equal(rows.sort().values.cpu(), expected):
            raise RuntimeError(
                f"the processes' rows are not the generation batch's {expected.numel()} rows "
                "once each (did TRL change how it splits a generation batch?)"
            )
        ordered = torch.empty_like(values)
        ordered[rows] = values
        return ordered

    def _reference_logps(self, batch: dict[str, Any]) -> Tensor:
        """[b, T] reference log-probs (ref_free=False): TRL's when beta > 0, else the PEFT
        model with its adapter disabled (or its "ref" adapter), as TRL takes them."""
        if batch.get("ref_per_token_logps") is not None:
            return batch["ref_per_token_logps"]
        model = self.accelerator.unwrap_model(self.model)
        with (
            profiling_context(self, "groupwise.reference_logps"),
            use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None),
        ):
            return self._no_grad_logps(batch)

    def _no_grad_logps(self, batch: dict[str, Any]) -> Tensor:
        """[b, T] per-token log-probs of the batch's completions under the current model,
        without gradient, through TRL's own log-prob function (same temperature, same fused
        head, same multimodal inputs as its loss)."""
        completion_ids = batch["completion_ids"]
        with (
            torch.no_grad(),
            disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
        ):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                torch.cat([batch["prompt_ids"], completion_ids], dim=1),
                torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1),
                completion_ids.size(1),
                batch_size=self.args.per_device_train_batch_size,
                **{key: batch[key] for key in FORWARD_KEYS if key in batch},
            )
        return logps

    # -----------------------------------------------------------------------------------------
    # Loss of a micro-batch

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, **kwargs
    ):
        result = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, **kwargs
        )
        if self._loss_pass is not None and self._loss_pass.logps is None:
            self._loss_pass = replace(self._loss_pass, logps=result[0])
            if self._generation is not None and self._generation.waiting:
                self._terms_from_loss_pass(self._loss_pass, self._generation)
        return result

    def _terms_from_loss_pass(self, loss_pass: _LossPass, record: _GenerationRecord) -> None:
        """The waiting generation batch's terms from the first loss forward pass: on-policy with
        one micro-batch per process, that pass is at the rollout policy, so its detached
        log-probs are the rollout l(q, o); TRL's loss reads the advantages only after it (the
        tests pin that order)."""
        mean_logp = sequence_mean_logp(loss_pass.logps.detach(), loss_mask(loss_pass.inputs))
        pref_loss = self._finish_terms(loss_pass.inputs, record, mean_logp)
        self._generation = replace(record, waiting=False, pref_loss=pref_loss)

    def _compute_loss(self, model, inputs):
        if not self.model.training or (ROWS_KEY not in inputs and not self._gmpo):
            return super()._compute_loss(model, inputs)
        loss, logps = self._trl_loss(model, inputs)
        if self._gmpo:
            loss = loss + self._gmpo_in_place_of_clip(logps, inputs)
        if COEFFICIENTS_KEY not in inputs:
            return loss
        accumulation = self.current_gradient_accumulation_steps
        if self._generation.pref_loss is not None:
            self._observe_losses(loss, accumulation, self._generation.pref_loss)
            self._generation = replace(self._generation, pref_loss=None)
        l_theta = sequence_mean_logp(logps, loss_mask(inputs))
        # l - sg(l): the gradient of sum_k c_k l_k with the value 0, so that TRL's logged `loss`
        # stays its own; L_pref's value is logged as amir/preference_loss.
        surrogate = preference_surrogate(l_theta - l_theta.detach(), inputs[COEFFICIENTS_KEY])
        # TRL's loss of a micro-batch is its share of the generation batch's, and processes'
        # gradients are averaged: this scale makes the micro-batches' and processes' AMIR
        # gradients add up to lambda * grad L_pref of the whole generation batch per
        # optimizer step (per steps_per_generation / accumulation steps of it).
        scale = self.accelerator.num_processes * self.args.steps_per_generation / accumulation
        loss = loss + self.lambda_reg.value * scale * surrogate
        if self.accelerator.sync_gradients:
            self._metrics["train"]["amir/lambda"].append(self.lambda_reg.value)
        return loss

    def _trl_loss(self, model, inputs) -> tuple[Tensor, Tensor]:
        """TRL's loss of the micro-batch and the policy's per-token log-probs [b, T] (with
        gradient) of its forward pass, kept by `_get_per_token_logps_and_entropies`."""
        self._loss_pass = _LossPass(inputs)
        try:
            loss = super()._compute_loss(model, inputs)
            logps = self._loss_pass.logps
        finally:
            self._loss_pass = None
        captured = logps is not None and logps.shape == inputs["completion_ids"].shape
        waiting = self._generation is not None and self._generation.waiting
        if waiting or not captured:
            raise RuntimeError(
                "GroupwiseGRPOTrainer could not capture the policy's log-probs of the loss from "
                "_get_per_token_logps_and_entropies (TRL's _compute_loss changed?)"
            )
        return loss, logps

    def _gmpo_in_place_of_clip(self, logps: Tensor, inputs: dict[str, Any]) -> Tensor:
        """GMPO's loss minus the clipped surrogate TRL's "grpo" loss holds (both aggregated as
        TRL's "grpo", divided by the accumulation steps as TRL divides), to add to TRL's loss
        (docs/algorithms.md, "GMPO")."""
        old = inputs.get("old_per_token_logps")
        mask, advantages = loss_mask(inputs), inputs["advantages"]
        terms = {
            name: policy_loss(
                logps,
                old,
                advantages,
                mask,
                eps_low=self.epsilon_low,
                eps_high=self.epsilon_high,
                surrogate=name,
                params=self._surrogate,
            )[0]
            for name in ("clip", "gmpo")
        }
        return (terms["gmpo"] - terms["clip"]) / self.current_gradient_accumulation_steps

    def _observe_losses(self, loss: Tensor, accumulation: int, pref_loss: float) -> None:
        """The official lambda rule, once per generation batch (docs/algorithms.md §2): L_GRPO is
        the first micro-batch's loss as TRL's _compute_loss returns it, times the accumulation steps
        it divided by, averaged over processes (so lambda stays the same everywhere)."""
        if self.lambda_reg.measure != "loss":
            return
        first = self.accelerator.reduce(loss.detach().float() * accumulation, reduction="mean")
        self.lambda_reg.observe_losses(float(first), pref_loss)

    # -----------------------------------------------------------------------------------------
    # Checkpoints

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.lambda_reg is not None and self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial),
                f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}",
            )
            with open(os.path.join(folder, STATE_FILE), "w") as handle:
                json.dump({"lambda_reg": self.lambda_reg.state_dict()}, handle)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if self.lambda_reg is None or checkpoint is None:
            return
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{path} is missing: the checkpoint was not written by GroupwiseGRPOTrainer with "
                "amir=True, so lambda_reg cannot be restored"
            )
        with open(path) as handle:
            self.lambda_reg.load_state_dict(json.load(handle)["lambda_reg"])
