"""What groupwise adds to one TRL generation batch, from its gathered tensors (REFERENCE.md 1-3).

TRL's GRPOTrainer gathers every process's rewards into one [B, F] tensor (one column per reward
function), group-major: rows g*G .. g*G+G-1 are the G completions of prompt g, and process p
holds rows p*b .. p*b+b-1. `batch_terms` turns that (plus the rollout policy's l(q, o) where
needed) into the LENS advantages and AMIR's per-completion coefficients of the whole batch, by
calling groupwise.algorithms; the trainer hands each process its rows. Pure functions: no TRL,
no model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from groupwise.algorithms import (
    AdvantageEstimator,
    AdvantageSettings,
    GroupRewards,
    group_types,
    mine_pairs,
    preference_coefficients,
)


@dataclass(frozen=True)
class Correctness:
    """Which reward function says whether a completion is correct (LENS, group types).

    index: its column in the [B, F] rewards. name: its name (for messages). value: what it
    returns for a correct completion (it must return 0 otherwise). weight: its reward weight.
    """

    index: int
    name: str
    value: float
    weight: float


@dataclass(frozen=True)
class PairSettings:
    """AMIR-GRPO's pair mining and preference term (REFERENCE.md 2): delta_r, pair mode, the
    per-group cap and beta_DPO."""

    margin: float
    mode: str
    max_pairs_per_group: int | None
    beta: float


@dataclass(frozen=True)
class BatchTerms:
    """groupwise's terms of a generation batch of B completions (all processes, group-major).

    advantages: [B] the estimator's advantages, or None where TRL keeps its own (grpo).
    coefficients: [B] AMIR's c_k = dL_pref/dl_k at the rollout policy, or None without AMIR.
    pair_losses: [P] -log sigmoid(z_p) of each pair at the rollout policy (nats).
    logp_margins: [P] l_old(chosen) - l_old(rejected) of each pair (nats per token).
    correct: [B] bool correctness, or None when no correctness reward is known or its values
        are not binary.
    """

    advantages: Tensor | None
    coefficients: Tensor | None
    pair_losses: Tensor
    logp_margins: Tensor
    correct: Tensor | None


def resolve_correctness(
    names: list[str], weights: Tensor, reward: str | None, value: float, required: bool
) -> Correctness | None:
    """The correctness reward function: `reward` by name, else the only reward function.

    Args:
        names: TRL's reward_func_names. weights: [F] TRL's reward_weights.
        reward: the configured name (GroupwiseGRPOConfig.correctness_reward) or None.
        value: its value on a correct completion (GroupwiseGRPOConfig.correct_value).
        required: whether the estimator needs correctness (LENS); then an unresolvable
            choice is an error, otherwise None.
    """
    if reward is not None:
        if reward not in names:
            raise ValueError(
                f"correctness_reward={reward!r} is not one of the reward functions {names}"
            )
        index = names.index(reward)
    elif len(names) == 1:
        index = 0
    elif required:
        raise ValueError(
            f"the advantage estimator needs to know which reward function says 'correct': "
            f"set correctness_reward to one of {names}"
        )
    else:
        return None
    return Correctness(index, names[index], float(value), float(weights[index]))


def is_binary(column: Tensor, value: float) -> bool:
    """Whether every entry of a correctness column is 0 or `value` (no NaN)."""
    return bool(((column == 0) | (column == value)).all())


def reward_totals(rewards_per_func: Tensor, weights: Tensor) -> Tensor:
    """[B] weighted sums of the reward functions, NaN (a function that returned None) counted
    as 0, as TRL's "sum_then_normalize". A row where every function returned None is an error:
    the estimators and pair mining need a reward for every completion."""
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if bool(unscorable.any()):
        row = int(unscorable.nonzero()[0, 0])
        raise ValueError(
            f"every reward function returned None for completion {row} of the generation "
            "batch; AMIR-GRPO and non-grpo advantage estimators need a reward for each one"
        )
    return (rewards_per_func * weights.to(rewards_per_func)).nansum(dim=1)


def correct_rows(
    rewards_per_func: Tensor, correctness: Correctness | None, *, required: bool
) -> Tensor | None:
    """[B] bool: the rows the correctness reward calls correct; None without a correctness
    reward, or when its column is not binary (0 or correct_value) and `required` is False (the
    group-type metrics are then left out). Raises, naming the reward, when it is required."""
    if correctness is None:
        return None
    column = rewards_per_func[:, correctness.index]
    if is_binary(column, correctness.value):
        return column == correctness.value
    if required:
        found = sorted({float(v) for v in column.unique()})
        raise ValueError(
            f"correctness reward '{correctness.name}' must return 0 or correct_value="
            f"{correctness.value} for every completion; it returned {found}"
        )
    return None


def batch_terms(
    rewards_per_func: Tensor,
    weights: Tensor,
    group_size: int,
    *,
    estimator: AdvantageEstimator | None,
    settings: AdvantageSettings,
    correctness: Correctness | None,
    pairs: PairSettings | None,
    mean_logp_old: Tensor | None = None,
    lengths: Tensor | None = None,
    ref_mean_logp: Tensor | None = None,
) -> BatchTerms:
    """Advantages and AMIR coefficients of a gathered generation batch (REFERENCE.md 1-3).

    Args:
        rewards_per_func: [B, F] every process's rewards, one column per reward function.
        weights: [F] reward weights; the total is their weighted sum (reward_totals).
        group_size: G (TRL's num_generations).
        estimator: the advantage estimator (groupwise.algorithms.get_advantage_estimator), or
            None to keep TRL's own GRPO advantages.
        settings: the estimator's AdvantageSettings.
        correctness: the correctness reward function, or None.
        pairs: AMIR-GRPO's PairSettings, or None without AMIR.
        mean_logp_old: [B] l(q, o) under the rollout policy (nats per token): needed with AMIR
            and by estimators that declare needs_rollout_logp.
        lengths: [B] completion lengths in tokens (LENS's "sequence" difficulty).
        ref_mean_logp: [B] l_ref under the reference policy, or None (reference-free).

    Returns:
        BatchTerms. With an estimator, AMIR mines its pairs on the totals the estimator returns
        (LENS-calibrated: REFERENCE.md 3, "AMIR-GRPO + LENS together"), else on the totals.
    """
    needs_totals = estimator is not None or pairs is not None
    totals = reward_totals(rewards_per_func, weights) if needs_totals else None
    correct = correct_rows(rewards_per_func, correctness, required=estimator is not None)
    advantages = None
    pair_rewards = totals
    if estimator is not None:
        if correct is None:
            raise ValueError(
                f"advantage estimator '{estimator.name}' needs a binary correctness reward "
                "(set correctness_reward and correct_value)"
            )
        if estimator.needs_rollout_logp and mean_logp_old is None:
            raise ValueError(f"advantage estimator '{estimator.name}' needs mean_logp_old")
        result = estimator.fn(
            GroupRewards(
                rewards=totals,
                correct=correct,
                group_size=group_size,
                correctness=correctness.weight * rewards_per_func[:, correctness.index],
                correct_reward=correctness.weight * correctness.value,
                mean_logp_old=mean_logp_old,
                lengths=lengths,
            ),
            settings,
        )
        advantages, pair_rewards = result.advantages, result.rewards
    coefficients = None
    pair_losses = logp_margins = rewards_per_func.new_zeros(0)
    if pairs is not None:
        if mean_logp_old is None:
            raise ValueError("AMIR-GRPO needs mean_logp_old, the rollout policy's l(q, o)")
        chosen, rejected = mine_pairs(
            pair_rewards,
            group_size,
            pairs.margin,
            mode=pairs.mode,
            max_pairs_per_group=pairs.max_pairs_per_group,
        )
        terms = preference_coefficients(
            mean_logp_old, ref_mean_logp, chosen, rejected, pairs.beta
        )
        coefficients, pair_losses, logp_margins = (
            terms.coefficients,
            terms.pair_losses,
            terms.logp_margins,
        )
    return BatchTerms(advantages, coefficients, pair_losses, logp_margins, correct)


def group_fractions(correct: Tensor, group_size: int) -> dict[str, float]:
    """Fractions of the batch's groups that are all correct, all wrong and mixed
    (REFERENCE.md 3's group types), under TRL-style metric names."""
    kinds = group_types(correct, group_size)
    return {f"groups/{kind}": float(flags.float().mean()) for kind, flags in kinds.items()}
