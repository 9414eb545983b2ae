"""Where a step's targets come from, chosen once per run (`choose_step_targets`).

- `WholeBatchTargets`: the advantages and AMIR pairs of the whole batch (every process's rows),
  computed before the first update (docs/algorithms.md §1-3); AMIR's coefficients then come
  micro-batch by micro-batch, from the rows' l_old and the update's pair count
  (docs/algorithms.md §2).
- `PerMicroBatchTargets`: each micro-batch's advantages from its own groups and its own
  training pass, which runs at the rollout policy (the step's first update is exactly
  on-policy). Possible for an estimator that needs logp_old and is per group (LENS), without
  AMIR (whose pair count normalises L_pref over the whole update) and with one mini-batch
  (later mini-batches need logp_old before their first pass). It saves the no-grad pass.

Rollout-policy log-probs (LENS's confidences, AMIR's l_old are their means): a row's come from
its first forward pass under the rollout policy. `upfront` says which rows need one no-grad
pass right after the rollout; every other row gets them from the step's first training pass,
which hands them to `of_micro`. (Where `upfront` is the step's one update of one micro-batch,
the learner runs that training pass first instead of a no-grad one: train.learner.)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from groupwise.algorithms import Algorithm, GroupTargets, sequence_mean_logp
from groupwise.train.batch import RolloutLogprobs, ScoredBatch, StepState
from groupwise.train.distributed import Distributed


class _Targets:
    """algorithm: what the run's options built; group_size: G; component: the correctness
    component (reward.correctness_component); dist: the processes whose rows are gathered;
    mask_truncated: truncated completions leave the loss, so they form no AMIR pair
    (docs/algorithms.md, "Overlong completions")."""

    def __init__(
        self,
        algorithm: Algorithm,
        group_size: int,
        component: str,
        dist: Distributed,
        mask_truncated: bool = False,
    ) -> None:
        self.algorithm, self.group_size, self.component, self.dist = (
            algorithm,
            group_size,
            component,
            dist,
        )
        self.mask_truncated = mask_truncated


class WholeBatchTargets(_Targets):
    """Targets of the whole batch before its first update."""

    def upfront(self, minibatches: list[slice]) -> list[slice]:
        """The mini-batches whose rows' logp_old one no-grad pass records after the rollout:
        all of them when the estimator needs logp_old before the first update; else those of
        mini-batches 2..M, which run after the policy moved (docs/algorithms.md §1)."""
        return minibatches if self.algorithm.estimator.needs_rollout_logp else minibatches[1:]

    def of_batch(self, batch: ScoredBatch, old: RolloutLogprobs) -> GroupTargets:
        """The whole batch's advantages and AMIR pairs (no coefficients yet), from its rows'
        rollout-policy log-probs where the estimator needs them."""
        mean_logp_old, lengths = None, None
        estimator = self.algorithm.estimator
        mask = batch.rollouts.completion_mask.bool()
        if estimator.needs_rollout_logp:
            local = sequence_mean_logp(old.of(slice(None)), mask)
            mean_logp_old = self.dist.place(batch.rows, local)
        if estimator.needs_rollout_logp or estimator.needs_lengths:
            lengths = self.dist.place(batch.rows, mask.sum(dim=1).float())
        rewards = batch.group_rewards(
            slice(None), self.group_size, self.component, mean_logp_old, lengths
        )
        unpaired = batch.truncated if self.mask_truncated else None
        return self.algorithm.targets(rewards, coefficients=False, unpaired=unpaired)

    def pairs(self, state: StepState, rows: slice) -> int:
        """AMIR pairs among this process's `rows` of the batch."""
        return state.targets.select(state.batch.rows[rows]).num_pairs

    def of_micro(
        self,
        state: StepState,
        micro: slice,
        old_logp: torch.Tensor,
        ref_logp: torch.Tensor | None,
        update_pairs: int,
    ) -> GroupTargets:
        """The micro-batch's rows of the batch's targets, with AMIR's coefficients from its
        rows' l_old (from old_logp [b, T], the rollout policy's) and l_ref (from ref_logp
        [b, T], unless reference-free) and the update's pair count (docs/algorithms.md §2)."""
        mine = state.targets.select(state.batch.rows[micro])
        pairs = self.algorithm.pair_settings
        if pairs is None:
            return mine
        mask = state.batch.rollouts.completion_mask[micro].bool()
        mean_logp_old = sequence_mean_logp(old_logp, mask)
        reference_free = self.algorithm.options.ref_free
        ref = None if reference_free else sequence_mean_logp(ref_logp.cpu(), mask)
        return mine.with_coefficients(mean_logp_old, ref, pairs.beta, num_pairs=update_pairs)

    def of_step(self, state: StepState, first_update: Sequence[GroupTargets]) -> GroupTargets:
        """The whole batch's targets, for the step's metrics and rollouts.jsonl."""
        return state.targets


class PerMicroBatchTargets(_Targets):
    """Each micro-batch's targets from its own groups and training pass (module docstring)."""

    def upfront(self, minibatches: list[slice]) -> list[slice]:
        """None: with one mini-batch every row's first pass is the on-policy training pass."""
        return minibatches[1:]

    def of_batch(self, batch: ScoredBatch, old: RolloutLogprobs) -> None:
        """Nothing before the updates."""
        return None

    def pairs(self, state: StepState, rows: slice) -> int:
        """No AMIR pairs (this strategy runs without AMIR)."""
        return 0

    def of_micro(
        self,
        state: StepState,
        micro: slice,
        old_logp: torch.Tensor,
        ref_logp: torch.Tensor | None,
        update_pairs: int,
    ) -> GroupTargets:
        """The estimator on the micro-batch's own groups, with their l_old from old_logp
        [b, T], its training pass's on the step's first update."""
        mask = state.batch.rollouts.completion_mask[micro].bool()
        rewards = state.batch.group_rewards(
            state.batch.rows[micro],
            self.group_size,
            self.component,
            sequence_mean_logp(old_logp, mask),
            mask.sum(dim=1).float(),
        )
        return self.algorithm.targets(rewards)

    def of_step(self, state: StepState, first_update: Sequence[GroupTargets]) -> GroupTargets:
        """The whole batch's targets from those of the first update's micro-batches
        (`first_update`: this process's rows, in order), gathered over processes."""
        rows = state.batch.rows
        empty = torch.zeros(0, dtype=torch.long)
        return GroupTargets(
            self.dist.place(rows, torch.cat([t.advantages for t in first_update])),
            self.dist.place(rows, torch.cat([t.rewards for t in first_update])),
            empty,
            empty,
        )


StepTargets = WholeBatchTargets | PerMicroBatchTargets


def choose_step_targets(
    algorithm: Algorithm,
    group_size: int,
    component: str,
    minibatches: int,
    dist: Distributed,
    mask_truncated: bool = False,
) -> StepTargets:
    """Per micro-batch where the estimator allows it and nothing needs the whole batch first
    (module docstring); the whole batch otherwise. The run's one decision of it."""
    estimator = algorithm.estimator
    per_micro_batch = (
        estimator.needs_rollout_logp
        and estimator.per_group
        and algorithm.pair_settings is None
        and minibatches == 1
    )
    strategy = PerMicroBatchTargets if per_micro_batch else WholeBatchTargets
    return strategy(algorithm, group_size, component, dist, mask_truncated)
