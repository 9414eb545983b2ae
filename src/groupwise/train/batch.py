"""A step's scored batch, as the trainer holds it between scoring and the updates.

The whole batch holds every process's B completions in question order (group-major: the G
completions of question q are rows q*G .. q*G+G-1); each process generated and trains on its
own rows of it (`ScoredBatch.rows`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from groupwise.algorithms import GroupRewards, GroupTargets
from groupwise.rewards import Scores, correct_value
from groupwise.rollout import Rollouts


@dataclass(frozen=True)
class ScoredBatch:
    """One step's rollouts and the whole batch's rewards.

    rollouts: this process's b completions. rows: [b] their rows in the whole batch.
    scores: the whole batch's rewards ([B] columns, total, correct). texts: the whole batch's B
    completions. truncated: [B] bool, completions cut at max_new_tokens.
    """

    rollouts: Rollouts
    rows: torch.Tensor
    scores: Scores
    texts: list[str]
    truncated: torch.Tensor

    def group_rewards(
        self,
        rows: slice | torch.Tensor,
        group_size: int,
        component: str,
        mean_logp_old: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
    ) -> GroupRewards:
        """What an advantage estimator sees of the whole batch's `rows` (whole groups).

        component: the correctness component (reward.correctness_component), which LENS
        calibrates inside the total (docs/algorithms.md §3); its weighted column is zeros, and its
        value on a correct answer 1.0, when the reward has none. mean_logp_old, lengths:
        [rows] the rollout l(q, o) and completion lengths, or None where the estimator needs
        none."""
        weight = self.scores.weights.get(component, 0.0)
        column = weight * self.scores.columns.get(component, torch.zeros_like(self.scores.total))
        correct_reward = weight * correct_value(component) if weight else 1.0
        return GroupRewards(
            rewards=self.scores.total[rows].float(),
            correct=self.scores.correct[rows],
            group_size=group_size,
            correctness=column.float()[rows],
            correct_reward=correct_reward,
            mean_logp_old=mean_logp_old,
            lengths=lengths,
        )


@dataclass(frozen=True)
class Learned:
    """What the updates of a step computed: the whole batch's targets (advantages [B], reward
    totals [B], AMIR pairs as whole-batch rows), each update's metrics, the difference of
    the trainer's rollout-policy log-probs to the sampler's (empty without sampler log-probs),
    and the seconds of the no-grad rollout-policy pass before the updates (0 where none ran)."""

    targets: GroupTargets
    updates: list[dict[str, float]]
    sampler: dict[str, float] = field(default_factory=dict)
    seconds_old_policy: float = 0.0


@dataclass(frozen=True)
class RolloutLogprobs:
    """Per-token log-probs of this process's rows under the rollout policy (detached, on the
    CPU): values [b, T], and recorded [b] bool, the rows that have them.

    A row's values are those of its first forward pass under the rollout policy: the no-grad
    pass after the rollout, or the step's first training pass, which runs before any update.
    `with_passes` is the one way they are recorded; it returns new log-probs, these stay as
    they are.
    """

    values: torch.Tensor
    recorded: torch.Tensor

    @classmethod
    def empty(cls, rows: int, length: int) -> RolloutLogprobs:
        """No row recorded yet, for b=`rows` completions of T=`length` tokens."""
        return cls(torch.zeros(rows, length), torch.zeros(rows, dtype=torch.bool))

    def with_passes(self, passes: Iterable[tuple[slice, torch.Tensor]]) -> RolloutLogprobs:
        """These log-probs plus, for each pass (rows, logp [rows, T]) under the rollout policy,
        the values of its rows not recorded yet."""
        values, recorded = self.values.clone(), self.recorded.clone()
        for rows, logp in passes:
            values[rows] = _first_values(values[rows], recorded[rows], logp)
            recorded[rows] = True
        return RolloutLogprobs(values, recorded)

    def of_pass(self, rows: slice, logp: torch.Tensor) -> torch.Tensor:
        """[rows, T]: the rows' values, where `logp` [rows, T], a pass under the rollout
        policy, gives those not recorded yet (what `with_passes` would record)."""
        return _first_values(self.values[rows], self.recorded[rows], logp)

    def of(self, rows: slice) -> torch.Tensor:
        """[rows, T]; every row must have been recorded."""
        if not bool(self.recorded[rows].all()):
            raise RuntimeError("rollout-policy log-probs of these rows were never recorded")
        return self.values[rows]


def _first_values(values: torch.Tensor, recorded: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """A copy of values [n, T] (CPU) with logp's [n, T] (detached) in the rows not recorded
    ([n] bool)."""
    first = values.clone()
    new = ~recorded
    first[new] = logp.detach().to(first)[new.to(logp.device)].cpu()
    return first


@dataclass(frozen=True)
class StepState:
    """What the updates of one step read: the run's steps before it, the scored batch, its rows'
    rollout-policy log-probs and the whole batch's targets (None where each micro-batch computes
    its own: train.step_targets). Built once before the step's first update and once more after
    it, with the log-probs its training passes recorded (train.learner)."""

    step: int
    batch: ScoredBatch
    old: RolloutLogprobs
    targets: GroupTargets | None = None


def concat_scores(parts: list[Scores]) -> Scores:
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


def take_scores(scores: Scores, order: torch.Tensor) -> Scores:
    """The rows `order` of scores, in that order."""
    return Scores(
        columns={k: v[order] for k, v in scores.columns.items()},
        weights=scores.weights,
        total=scores.total[order],
        correct=scores.correct[order],
        verdicts=[scores.verdicts[i] for i in order.tolist()],
    )


def with_column(scores: Scores, name: str, values: torch.Tensor, weight: float) -> Scores:
    """scores with one more reward column `name` ([B] unweighted values) added to the total
    with `weight` (the soft overlong punishment: docs/algorithms.md, "Overlong completions")."""
    values = values.to(scores.total.dtype)
    return Scores(
        columns={**scores.columns, name: values},
        weights={**scores.weights, name: weight},
        total=scores.total + weight * values,
        correct=scores.correct,
        verdicts=scores.verdicts,
    )
