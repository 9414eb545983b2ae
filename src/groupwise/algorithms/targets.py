"""A batch's targets: what every engine computes where whole groups are visible
(docs/algorithms.md §1-3).

The one place of the sequence

    GroupRewards -> advantage estimator -> AMIR pairs mined on the estimator's reward totals
                 -> AMIR's per-completion coefficients at the rollout policy

that groupwise's trainer and the TRL adapter both call (`group_targets`). An engine then adds
`loss_terms` per row (objective.py) with the targets' advantages and coefficients.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from groupwise.algorithms.estimators import AdvantageEstimator, AdvantageSettings, GroupRewards
from groupwise.algorithms.overlong import pairs_without
from groupwise.algorithms.preference import mine_pairs, preference_coefficients


@dataclass(frozen=True)
class PairSettings:
    """AMIR-GRPO's pair mining and preference term (docs/algorithms.md §2): delta_r (reward units),
    pair mode ("all" | "topk"), the per-group cap and beta_DPO."""

    margin: float
    mode: str = "all"
    max_pairs_per_group: int | None = None
    beta: float = 0.5


@dataclass(frozen=True)
class GroupTargets:
    """The targets of B completions (whole groups, group-major).

    advantages: [B] the estimator's advantages.
    rewards: [B] the reward totals they were computed from (LENS-calibrated under LENS); AMIR's
        pairs are mined on them.
    chosen, rejected: [P] AMIR pairs as row indices into these B rows (empty without AMIR).
    coefficients: [B] AMIR's c_k = dL_pref/dl_k at the rollout policy; None without AMIR, or
        until the rollout policy's l(q, o) is known (`with_coefficients`).
    pair_losses: [P] -log sigmoid(z_p) of each pair at the rollout policy (nats).
    logp_margins: [P] l_old(chosen) - l_old(rejected) of each pair (nats per token).
    unshaped_rewards: [B] the weighted reward totals before the estimator reshaped them (equal
        to `rewards` under GRPO; under LENS without its calibrated penalties of wrong answers);
        None where not known.
    """

    advantages: Tensor
    rewards: Tensor
    chosen: Tensor
    rejected: Tensor
    coefficients: Tensor | None = None
    pair_losses: Tensor | None = None
    logp_margins: Tensor | None = None
    unshaped_rewards: Tensor | None = None

    @property
    def num_pairs(self) -> int:
        return self.chosen.numel()

    def with_coefficients(
        self,
        mean_logp_old: Tensor,
        ref_mean_logp: Tensor | None,
        beta: float,
        num_pairs: int | None = None,
    ) -> GroupTargets:
        """These targets with AMIR's coefficients from the rollout policy's l(q, o) [B] (and
        l_ref [B], or None: reference-free); num_pairs normalises L_pref (default: these rows'
        pairs; pass the update's count when these rows are a part of it). docs/algorithms.md §2."""
        terms = preference_coefficients(
            mean_logp_old, ref_mean_logp, self.chosen, self.rejected, beta, num_pairs=num_pairs
        )
        return replace(
            self,
            coefficients=terms.coefficients,
            pair_losses=terms.pair_losses,
            logp_margins=terms.logp_margins,
        )

    def select(self, rows: Tensor) -> GroupTargets:
        """The targets of `rows` ([b] row indices forming whole groups, in order), with the
        pairs inside them re-indexed into those b rows (pairs never cross groups)."""
        position = torch.full((self.advantages.numel(),), -1, dtype=torch.long)
        position[rows] = torch.arange(rows.numel())
        inside = position[self.chosen] >= 0
        pairs_only = (self.pair_losses, self.logp_margins)
        return GroupTargets(
            self.advantages[rows],
            self.rewards[rows],
            position[self.chosen[inside]],
            position[self.rejected[inside]],
            None if self.coefficients is None else self.coefficients[rows],
            *(None if t is None else t[inside] for t in pairs_only),
            None if self.unshaped_rewards is None else self.unshaped_rewards[rows],
        )


def group_targets(
    batch: GroupRewards,
    estimator: AdvantageEstimator,
    settings: AdvantageSettings,
    pairs: PairSettings | None = None,
    *,
    ref_mean_logp: Tensor | None = None,
    coefficients: bool = True,
    scorable: Tensor | None = None,
    unpaired: Tensor | None = None,
) -> GroupTargets:
    """Advantages, AMIR pairs and AMIR coefficients of a batch of whole groups (docs/algorithms.md
    §1-3; "AMIR-GRPO + LENS together": pairs are mined on the estimator's reward totals).

    Args:
        batch: the rewards, correctness and (where needed) rollout l(q, o) of the B rows.
        estimator: the advantage estimator (get_advantage_estimator).
        settings: its AdvantageSettings.
        pairs: AMIR-GRPO's PairSettings, or None without AMIR.
        ref_mean_logp: [B] l_ref under the reference policy, or None (reference-free).
        coefficients: compute AMIR's coefficients here, from batch.mean_logp_old, with L_pref
            averaged over these rows' pairs. False leaves them to `with_coefficients`, for an
            engine that measures l(q, o) later or averages over each update's pairs
            (groupwise's trainer: micro-batch by micro-batch).
        scorable: [B] bool, False where the reward is unknown (TRL: every reward function
            returned None; the row's rewards are then ignored). A group with such a row is left
            out: its advantages are 0 and it forms no pair, since its group statistics (mean,
            std, LENS's difficulty) would need every row's reward.
        unpaired: [B] bool, True on rows that form no AMIR pair (masked out of the loss:
            docs/algorithms.md, "Overlong completions"); None: every row may.

    Returns:
        GroupTargets.
    """
    if estimator.needs_rollout_logp and batch.mean_logp_old is None:
        raise ValueError(f"advantage estimator '{estimator.name}' needs mean_logp_old")
    kept = None
    if scorable is not None and not bool(scorable.all()):
        kept = scorable.reshape(-1, batch.group_size).all(dim=1)
        rows = kept.repeat_interleave(batch.group_size)
        batch = replace(
            batch,
            rewards=batch.rewards.where(rows, 0.0),
            correct=batch.correct & rows,
            correctness=None if batch.correctness is None else batch.correctness.where(rows, 0.0),
        )
    result = estimator.fn(batch, settings)
    advantages = result.advantages
    if kept is not None:
        advantages = advantages.where(kept.repeat_interleave(batch.group_size), 0.0)
    empty = torch.zeros(0, dtype=torch.long, device=result.rewards.device)
    targets = GroupTargets(advantages, result.rewards, empty, empty, unshaped_rewards=batch.rewards)
    if pairs is None:
        return targets
    chosen, rejected = mine_pairs(
        result.rewards,
        batch.group_size,
        pairs.margin,
        mode=pairs.mode,
        max_pairs_per_group=pairs.max_pairs_per_group,
    )
    if kept is not None:
        inside = kept[chosen // batch.group_size]
        chosen, rejected = chosen[inside], rejected[inside]
    if unpaired is not None:
        chosen, rejected = pairs_without(chosen, rejected, unpaired)
    targets = replace(targets, chosen=chosen, rejected=rejected)
    if not coefficients:
        return targets
    if batch.mean_logp_old is None:
        raise ValueError(
            "AMIR-GRPO's coefficients need mean_logp_old, the rollout policy's l(q, o)"
        )
    return targets.with_coefficients(batch.mean_logp_old, ref_mean_logp, pairs.beta)


def largest_reward_gap(
    ranges: list[tuple[float, float] | None], weights: list[float]
) -> float | None:
    """The largest difference two completions' weighted reward totals can have: the sum of
    |weight| x (max - min) over the reward's parts with a non-zero weight (inf for a part
    unbounded above); None when some part's range is unknown."""
    if any(r is None for r in ranges):
        return None
    return sum(
        abs(w) * (high - low) for (low, high), w in zip(ranges, weights, strict=True) if w != 0
    )


def unreachable_margin(
    margin: float,
    estimator: AdvantageEstimator,
    ranges: list[tuple[float, float] | None],
    weights: list[float],
    correct_reward: float,
    group_size: int,
    option: str = "margin",
) -> str | None:
    """Why AMIR-GRPO can never mine a pair, or None when it can or it is unknowable.

    Pairs need r_i - r_j > margin, strictly, on the estimator's reward totals
    (docs/algorithms.md §2), so a margin at or above their largest possible gap leaves AMIR's term
    absent for the whole run. ranges, weights: each reward part's (min, max) (None: unknown) and
    weight; correct_reward: what the correctness part adds for a correct answer (weight x value);
    the estimator's `reward_gap` says how its totals widen the gap (LENS: + correct_reward/G);
    option: the margin's name as the user typed it, for the message.
    """
    gap = largest_reward_gap(ranges, weights)
    if gap is None or estimator.reward_gap is None:
        return None
    gap = estimator.reward_gap(gap, correct_reward, group_size)
    if margin < gap:
        return None
    return (
        f"{option}={margin:g} is not below {gap:g}, the largest gap two completions' rewards "
        "can have "
        f"(under the '{estimator.name}' estimator): AMIR-GRPO would mine no preference pair "
        "and its term would be absent. Set it below the reward's range (with a 0/1 "
        "correctness reward, e.g. 0.5)"
    )


def _group_gaps(rewards: Tensor, group_size: int) -> Tensor:
    """[B / G] max - min of each group's rewards [B]."""
    grouped = rewards.reshape(-1, group_size)
    return grouped.max(dim=1).values - grouped.min(dim=1).values


class PairlessWarning:
    """Warns once when a batch has groups whose rewards differ but AMIR mined no pair in it:
    the margin is larger than every reward gap the batch shows (docs/algorithms.md §2).

    A group whose rewards differ only by the estimator's shaping is not counted: under LENS a
    group with no correct answer differs only by the calibrated penalties of its wrong answers,
    each in [-correct reward / G, 0) (docs/algorithms.md §3, "AMIR-GRPO + LENS together"), far
    below a margin meant to separate a correct answer from a wrong one. No pair there is
    intended, and lowering the margin would pair wrong answers by the model's confidence.
    """

    def __init__(self, margin: float, option: str = "margin") -> None:
        self.margin, self.option = margin, option
        self.warned = False

    def observe(self, targets: GroupTargets, group_size: int) -> None:
        """Warn (once per run) when `targets` [B rows, whole groups of `group_size`] hold no
        pair while some group's reward totals differ before the estimator's shaping."""
        if self.warned or targets.num_pairs > 0:
            return
        gaps = _group_gaps(targets.rewards, group_size)
        differing = gaps > 0
        if targets.unshaped_rewards is not None:
            differing &= _group_gaps(targets.unshaped_rewards, group_size) > 0
        shaped_only = int((gaps > 0).sum()) - int(differing.sum())
        if not bool(differing.any()):
            return
        self.warned = True
        left_out = (
            f" ({shaped_only} more group(s) differ only by the estimator's shaping, LENS's "
            "penalties of wrong answers, which AMIR-GRPO is not meant to pair)"
            if shaped_only
            else ""
        )
        warnings.warn(
            f"AMIR-GRPO mined no preference pair in {int(differing.sum())} group(s) whose "
            f"rewards differ{left_out}: the largest reward gap in such a group was "
            f"{float(gaps[differing].max()):.4g}, not above {self.option}={self.margin:g}; "
            f"AMIR's term is absent until a gap exceeds it. Lower {self.option} below the "
            "reward's gaps (this warning is shown once)",
            stacklevel=3,
        )
