"""The learning half of a training step: a scored batch -> its optimizer updates.

    rollout-policy log-probs where needed first -> targets (advantages, AMIR pairs:
    train.step_targets) -> for each epoch, for each mini-batch, one update (train.update) of
    micro-batches of  share * (policy + gamma * KL) + lambda * the AMIR term

Every algorithm decision is a call into groupwise.algorithms (the Algorithm the run's options
built: estimator, pairs, AdaptiveLambda; `loss_terms`; `micro_batch_share`). Micro-batches hold
whole groups and every share is taken of the update's GLOBAL batch (completions, tokens, pairs),
so summing micro-batches and processes (one all-reduce before clipping) gives the gradient of
the whole update (docs/algorithms.md §1). Several processes: each trains on its own whole questions
of every mini-batch; targets and pairs are computed over the gathered batch, and the k-th
micro-batches of all processes feed AdaptiveLambda together, so lambda is the same everywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch

from groupwise.algorithms import (
    Algorithm,
    GroupTargets,
    ImportanceCorrection,
    LossSettings,
    LossTerms,
    group_types,
    importance_weights,
    loss_terms,
    micro_batch_share,
    mismatch_metrics,
    mismatch_sums,
)
from groupwise.rollout import Rollouts
from groupwise.train.batch import Learned, RolloutLogprobs, ScoredBatch, StepState
from groupwise.train.distributed import Distributed
from groupwise.train.policy import PolicyLogprobs
from groupwise.train.probes import AllWrongGradient, GradientProbe, PreferenceGradient
from groupwise.train.step_metrics import micro_batch_metrics
from groupwise.train.step_targets import StepTargets
from groupwise.train.update import MicroBatchLoss, Updater


class RolloutPass(NamedTuple):
    """A training pass of the policy at the rollout policy, run before the step's targets:
    rows, and logp [rows, T] with its graph, which the first loss over those rows reuses;
    entropy [rows, T] (with its graph) where the algorithm needs entropies, else None."""

    rows: slice
    logp: torch.Tensor
    entropy: torch.Tensor | None = None


@dataclass(frozen=True)
class MicroBatchResult:
    """What one micro-batch's loss computed. rows: its rows of this process's batch. loss: its
    part of the update (weighted loss with gradient, metrics) for the updater. old_logp:
    [rows, T] its rows' rollout-policy log-probs (on the step's first update, from its own
    training pass where no earlier pass recorded them). targets: the targets its loss used.
    policy_logp: [rows, T] its training pass's log-probs (detached, CPU) on the step's first
    update, which runs at the rollout policy, where logp_old is the sampler's (they measure the
    gap); None otherwise."""

    rows: slice
    loss: MicroBatchLoss
    old_logp: torch.Tensor
    targets: GroupTargets
    policy_logp: torch.Tensor | None = None


@dataclass(frozen=True)
class UpdateResult:
    """One optimizer update's metrics and the results of its micro-batches, in row order."""

    metrics: dict[str, float]
    micro_batches: tuple[MicroBatchResult, ...]


@dataclass(frozen=True)
class LossInputs:
    """The per-row inputs of one micro-batch's loss terms (`groupwise.algorithms.loss_terms`):
    logp / old_logp / ref_logp [b, T] per-token log-probs (policy with gradient, rollout policy
    when off-policy, reference), mask [b, T] bool, advantages [b], token_weights [b, T] (the
    importance correction against the sampler) or None, entropy [b, T] the per-token entropies
    (with gradient) where an entropy option is on, else None."""

    logp: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    token_weights: torch.Tensor | None = None
    entropy: torch.Tensor | None = None

    def terms(self, settings: LossSettings, coefficients: torch.Tensor | None = None) -> LossTerms:
        return loss_terms(
            self.logp,
            self.mask,
            self.advantages,
            settings,
            old_logp=self.old_logp,
            ref_logp=self.ref_logp,
            coefficients=coefficients,
            token_weights=self.token_weights,
            entropy=self.entropy,
        )

    def rows(self, keep: torch.Tensor) -> LossInputs:
        """The inputs of the rows where `keep` ([b] bool) is set."""
        optional = (self.old_logp, self.ref_logp, self.token_weights, self.entropy)
        return LossInputs(
            *(t[keep] for t in (self.logp, self.mask, self.advantages)),
            *(None if t is None else t[keep] for t in optional),
        )


@dataclass(frozen=True)
class UpdatePlan:
    """One update's place in the step. rows: this process's rows (whole groups of one
    mini-batch). on_policy: no optimizer step yet in this step (ratio exactly 1). first_use: the
    rows' first epoch, when AdaptiveLambda observes the losses (docs/algorithms.md §2). totals: the
    update's rows, completion tokens and AMIR pairs over every process. probes: its gradient
    probes (train.probes)."""

    rows: slice
    on_policy: bool
    first_use: bool
    totals: tuple[int, int, int]
    probes: list[GradientProbe]


@dataclass(frozen=True)
class LearnSettings:
    """What the learner needs of the config: G, the micro-batch size (completions), the
    mini-batches M and epochs per step, the KL weight gamma, the aggregation, the loss terms'
    settings, whether to measure the all-wrong rows' gradient, the rollout correction against
    the sampler's log-probs (None: off; groupwise.algorithms.importance),
    whether truncated completions leave the loss (docs/algorithms.md, "Overlong completions"),
    and whether logp_old is the sampler's log-probs (rollout.logp_old=sampler) rather than the
    trainer's own."""

    group_size: int
    micro_batch_size: int
    minibatches: int
    num_iterations: int
    kl_coef: float
    aggregation: str
    loss: LossSettings
    log_all_wrong_gradient: bool
    importance: ImportanceCorrection | None = None
    mask_truncated: bool = False
    logp_old_from_sampler: bool = False


class Learner:
    """Turns a step's scored batch into its updates (module docstring)."""

    def __init__(
        self,
        settings: LearnSettings,
        algorithm: Algorithm,
        targets: StepTargets,
        passes: PolicyLogprobs,
        updater: Updater,
        dist: Distributed,
    ) -> None:
        self.settings, self.algorithm, self.targets = settings, algorithm, targets
        self.passes, self.updater, self.dist = passes, updater, dist
        # the config's clip range, aggregation and KL with the algorithm's policy loss and
        # entropy controls (docs/algorithms.md, "Policy losses: CISPO, GMPO, SAPO")
        self.loss = algorithm.loss_settings(settings.loss)

    def learn(self, batch: ScoredBatch, step: int) -> Learned:
        """The batch's targets, then its updates: for each epoch, one optimizer update per
        mini-batch. step: the run's steps before this one. Returns the whole batch's targets and
        each update's metrics."""
        s = self.settings
        minibatches = self._minibatches(len(batch.rollouts))
        old, first_pass, seconds_old_policy = self._rollout_logprobs(batch.rollouts, minibatches)
        state = StepState(step, batch, old, self.targets.of_batch(batch, old))
        # masked truncated rows form no pair whatever the margin: the warning would blame it
        if self.algorithm.pairless is not None and not s.mask_truncated:
            self.algorithm.pairless.observe(state.targets, s.group_size)
        first = self._update(
            state, self._plan(state, minibatches[0], on_policy=True, first_use=True), first_pass
        )
        # the first update ran at the rollout policy: its passes give its rows' logp_old
        recorded = old.with_passes((r.rows, r.old_logp) for r in first.micro_batches)
        trainer_logp = recorded
        if s.logp_old_from_sampler:  # logp_old is the sampler's: its passes measure the gap
            trainer_logp = RolloutLogprobs.empty(*old.values.shape).with_passes(
                (r.rows, r.policy_logp) for r in first.micro_batches
            )
        state = replace(state, old=recorded)
        later = [
            self._update(state, self._plan(state, rows, on_policy=False, first_use=epoch == 0))
            for epoch in range(s.num_iterations)
            for m, rows in enumerate(minibatches)
            if epoch or m
        ]
        return Learned(
            self.targets.of_step(state, [r.targets for r in first.micro_batches]),
            [first.metrics, *(update.metrics for update in later)],
            self._sampler_difference(state.batch.rollouts, trainer_logp),
            seconds_old_policy=seconds_old_policy,
        )

    def _sampler_difference(
        self, rollouts: Rollouts, trainer_logp: RolloutLogprobs
    ) -> dict[str, float]:
        """The mismatch between the trainer's log-probs at the rollout policy and the sampler's
        over the completion tokens of the rows the trainer computed, where the rollouts carry
        the sampler's log-probs (groupwise.algorithms.mismatch_metrics: sums over every
        process, extremes over this process's)."""
        if rollouts.sampler_logp is None:
            return {}
        mask = rollouts.completion_mask.bool() & trainer_logp.recorded[:, None]
        sums = mismatch_sums(trainer_logp.values, rollouts.sampler_logp, mask)
        additive = ["tokens", "sequences", "abs_diff", "k1", "k3", "rho2", "rho2_seq"]
        totals = self.dist.sum([sums[key] for key in additive])
        sums.update(zip(additive, (float(total) for total in totals), strict=True))
        return mismatch_metrics(sums)

    def _rollout_logprobs(
        self, rollouts: Rollouts, minibatches: list[slice]
    ) -> tuple[RolloutLogprobs, RolloutPass | None, float]:
        """logp_old of the rows the targets need before their first training pass
        (train.step_targets), from one no-grad pass (every row's from the sampler's log-probs
        with rollout.logp_old=sampler: no pass); the training pass that gave them instead,
        where the step is one update of one micro-batch (None otherwise); and the no-grad
        pass's seconds (0 without one).

        One update of one micro-batch (every row of this process): that pass runs at the
        rollout policy, so it is run first, with gradient, gives logp_old, and its loss reuses
        it (the no-grad pass, a third of an update, is not needed)."""
        old = RolloutLogprobs.empty(len(rollouts), rollouts.completion_ids.shape[1])
        if self.settings.logp_old_from_sampler:
            if rollouts.sampler_logp is None:
                raise RuntimeError("rollout.logp_old=sampler: no sampler log-probs came back")
            return old.with_passes([(slice(None), rollouts.sampler_logp)]), None, 0.0
        upfront = self.targets.upfront(minibatches)
        if upfront and upfront == minibatches and self._micro_batches(upfront[0]) == upfront:
            first = RolloutPass(upfront[0], *self._policy_pass(rollouts, upfront[0]))
            return old.with_passes([(first.rows, first.logp)]), first, 0.0
        start = time.perf_counter()
        with torch.no_grad():
            old = old.with_passes(
                (rows, self.passes.logprobs(rollouts, rows))
                for minibatch in upfront
                for rows in self._micro_batches(minibatch)
            )
        return old, None, time.perf_counter() - start if upfront else 0.0

    def _plan(self, state: StepState, rows: slice, on_policy: bool, first_use: bool) -> UpdatePlan:
        """An update's place in the step, with its global row, token and pair counts."""
        mask = self._loss_mask(state.batch.rollouts, rows)
        pairs = self.targets.pairs(state, rows)
        totals = self.dist.sum([rows.stop - rows.start, int(mask.sum()), pairs])
        return UpdatePlan(
            rows, on_policy, first_use, tuple(int(t) for t in totals), self._probes(state.step)
        )

    def _probes(self, step: int) -> list[GradientProbe]:
        """This update's gradient probes (train/probes.py): the AMIR term's gradient when lambda
        is measured by gradients this update; the all-wrong rows' with the LENS diagnostic."""
        probes: list[GradientProbe] = []
        lambda_reg, params = self.algorithm.lambda_reg, self.updater.params
        if lambda_reg is not None and lambda_reg.measures_gradient(step):
            probes.append(PreferenceGradient(params, lambda_reg))
        if self.settings.log_all_wrong_gradient:
            probes.append(AllWrongGradient(params))
        return probes

    def _update(
        self, state: StepState, plan: UpdatePlan, first_pass: RolloutPass | None = None
    ) -> UpdateResult:
        """One optimizer update on this process's rows of one mini-batch (and the other
        processes' rows of it): each micro-batch's loss, its backward pass as it comes, then the
        step. first_pass: a training pass of the rows of one of its micro-batches, to reuse.
        Returns its metrics and the micro-batches' results."""
        results = []
        for micro in self._micro_batches(plan.rows):
            result = self._micro_batch(state, plan, micro, first_pass)
            self.updater.backward(result.loss)
            results.append(result)
        metrics = self.updater.apply([result.loss for result in results], plan.probes)
        metrics["pairs"] = plan.totals[2]
        if self.algorithm.lambda_reg is not None:
            metrics["lambda"] = self.algorithm.lambda_reg.value
        if self.loss.entropy_bonus:
            metrics["entropy_coef"] = self.algorithm.entropy_coef()
        if self.algorithm.adaptive_entropy is not None:  # the update's mean token entropy
            self.algorithm.adaptive_entropy.observe(metrics["entropy"])
        return UpdateResult(metrics, tuple(results))

    def _policy_pass(
        self, rollouts: Rollouts, rows: slice
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The policy's training pass over `rows`: logp [rows, T], and the per-token entropies
        [rows, T] from the same pass where the algorithm needs them (else None: no cost)."""
        if self.algorithm.needs_entropy:
            return self.passes.logprobs(rollouts, rows, entropy=True)
        return self.passes.logprobs(rollouts, rows), None

    def _micro_batch(
        self, state: StepState, plan: UpdatePlan, micro: slice, first_pass: RolloutPass | None
    ) -> MicroBatchResult:
        """A micro-batch's forward passes (first_pass's where it covers these rows), targets
        and loss terms (groupwise.algorithms): share * L_GRPO + lambda * the AMIR term, the
        probes given their parts."""
        s = self.settings
        rows, tokens, pairs = plan.totals
        rollouts = state.batch.rollouts
        mask = self._loss_mask(rollouts, micro).to(self.passes.device)
        ref_logp = self.passes.reference(rollouts, micro)
        reuse = first_pass is not None and first_pass.rows == micro
        logp, entropy = first_pass[1:] if reuse else self._policy_pass(rollouts, micro)
        # no update yet in this step: the pass is at the rollout policy, so it gives logp_old
        old = state.old.of_pass(micro, logp) if plan.on_policy else state.old.of(micro)
        mine = self.targets.of_micro(state, micro, old, ref_logp, pairs)
        inputs = LossInputs(
            logp,
            mask,
            mine.advantages.to(logp.device),
            old_logp=None if plan.on_policy else old.to(logp.device),
            ref_logp=ref_logp,
            token_weights=self._importance_weights(state.batch, micro, old, mask),
            entropy=entropy,
        )
        coefficients = None if mine.coefficients is None else mine.coefficients.to(logp.device)
        terms = inputs.terms(self.loss, coefficients)
        share = micro_batch_share(
            s.aggregation, micro.stop - micro.start, int(mask.sum()), rows, tokens
        )
        policy_and_kl = terms.grpo(s.kl_coef, self.algorithm.entropy_coef())
        if self.algorithm.lambda_reg is not None and plan.first_use:
            self._observe_losses(float(policy_and_kl.detach()) * share, share, mine)
        loss = share * policy_and_kl + self._preference_part(terms, plan.probes)
        self._probe_all_wrong(state.batch, micro, inputs, plan)
        # max: with algorithm.mask_truncated an update may have no token left in its loss
        metrics = micro_batch_metrics(terms, mine, share, int(mask.sum()) / max(tokens, 1))
        measures_gap = plan.on_policy and s.logp_old_from_sampler
        policy_logp = logp.detach().cpu() if measures_gap else None
        return MicroBatchResult(micro, MicroBatchLoss(loss, metrics), old, mine, policy_logp)

    def _loss_mask(self, rollouts: Rollouts, rows: slice) -> torch.Tensor:
        """[rows, T] bool: the completion tokens the loss sees; none of a truncated completion's
        with algorithm.mask_truncated (it keeps its part in the group's statistics)."""
        mask = rollouts.completion_mask[rows].bool()
        if self.settings.mask_truncated:
            mask = mask & ~rollouts.truncated[rows, None]
        return mask

    def _importance_weights(
        self, batch: ScoredBatch, micro: slice, old_logp: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor | None:
        """The rollout correction's weights [b, T] of a micro-batch against the sampler's
        log-probs, at the trainer's rollout-policy log-probs old_logp [b, T], when the
        correction is on; None otherwise. mask: [b, T] its loss tokens, on the policy's
        device."""
        sampler = batch.rollouts.sampler_logp
        if self.settings.importance is None or sampler is None:
            return None
        return importance_weights(
            old_logp.to(mask.device),
            sampler[micro].to(mask.device),
            mask,
            self.settings.importance,
        )

    def _preference_part(self, terms: LossTerms, probes: list[GradientProbe]) -> Any:
        """lambda * the AMIR term, to add to the micro-batch's loss; or, when lambda is measured
        by gradients this update, 0, with the term's gradient kept apart by its probe."""
        if terms.preference is None:
            return 0.0
        for probe in probes:
            if isinstance(probe, PreferenceGradient):
                probe.add(terms.preference)
                return 0.0
        return self.algorithm.lambda_reg.value * terms.preference

    def _probe_all_wrong(
        self, batch: ScoredBatch, micro: slice, inputs: LossInputs, plan: UpdatePlan
    ) -> None:
        """train.log_all_wrong_gradient: the gradient of the all-wrong rows' part of the
        micro-batch's share * L_GRPO, kept by its probe. A micro-batch's aggregated loss splits
        exactly into row subsets, each weighted by its own share of the update
        (micro_batch_share), so this is their exact contribution (docs/algorithms.md §1 and §3)."""
        probe = next((p for p in plan.probes if isinstance(p, AllWrongGradient)), None)
        if probe is None:
            return
        s = self.settings
        all_wrong = group_types(batch.scores.correct, s.group_size)["all_wrong"]
        wrong = all_wrong.repeat_interleave(s.group_size)[batch.rows[micro]].to(self.passes.device)
        if not bool((inputs.advantages[wrong] != 0).any()) and s.kl_coef == 0:
            return  # no such rows, or all their advantages are 0: a zero gradient, no backward
        part = inputs.rows(wrong)
        rows, tokens, _ = plan.totals
        share = micro_batch_share(
            s.aggregation, int(wrong.sum()), int(part.mask.sum()), rows, tokens
        )
        probe.add(share * part.terms(self.loss).grpo(s.kl_coef, self.algorithm.entropy_coef()))

    def _observe_losses(self, weighted_pg: float, share: float, mine: GroupTargets) -> None:
        """One loss computation for AdaptiveLambda: the k-th micro-batches of every process,
        L_GRPO pooled by their shares and L_pref by their pairs, so that every process applies
        the same update (none where no process has a pair)."""
        pg_sum, share_sum, pref_sum, pairs = self.dist.sum(
            [weighted_pg, share, float(mine.pair_losses.sum()), mine.num_pairs]
        )
        if pairs > 0:
            self.algorithm.lambda_reg.observe_losses(pg_sum / share_sum, pref_sum / pairs)

    def _minibatches(self, rows: int) -> list[slice]:
        """This process's rows of each mini-batch: its questions are mini-batch-major."""
        per = rows // self.settings.minibatches
        return [slice(start, start + per) for start in range(0, rows, per)]

    def _micro_batches(self, rows: slice) -> list[slice]:
        """`rows` in micro-batches of whole groups (at least one group each)."""
        group_size = self.settings.group_size
        per = max(group_size, self.settings.micro_batch_size // group_size * group_size)
        return [slice(s, min(s + per, rows.stop)) for s in range(rows.start, rows.stop, per)]
