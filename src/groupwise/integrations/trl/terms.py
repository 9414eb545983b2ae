"""TRL's reward columns as groupwise's GroupRewards (docs/algorithms.md §1-3).

TRL's GRPOTrainer gathers every process's rewards into one [B, F] tensor (one column per reward
function; NaN where a function returned None), group-major: rows g*G .. g*G+G-1 are the G
completions of prompt g, and process p holds rows p*b .. p*b+b-1. `group_rewards` maps that
(plus the rollout policy's l(q, o) where needed) onto what groupwise.algorithms.group_targets
takes; the algorithm itself lives there. Pure functions: no TRL, no model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from groupwise.algorithms import GroupRewards, group_types


@dataclass(frozen=True)
class Correctness:
    """Which reward function says whether a completion is correct (LENS, group types, AMIR's
    margin check).

    index: its column in the [B, F] rewards. name: its name (for messages). value: what it
    returns for a correct completion (it must return 0 otherwise). weight: its reward weight.
    """

    index: int
    name: str
    value: float
    weight: float


def resolve_correctness(
    names: list[str], weights: Tensor, reward: str | None, value: float, required: bool
) -> Correctness | None:
    """The correctness reward function: `reward` by name; else, when `required` (LENS) and
    there is only one reward function, that one; else None (AlgorithmOptions.build refuses an
    estimator that needs correctness without it).

    Args:
        names: TRL's reward_func_names. weights: [F] TRL's reward_weights.
        reward: the configured name (GroupwiseGRPOConfig.correctness_reward) or None.
        value: its value on a correct completion (GroupwiseGRPOConfig.correctness_value).
        required: whether the estimator needs correctness (LENS).
    """
    if reward is not None:
        if reward not in names:
            raise ValueError(
                f"correctness_reward={reward!r} is not one of the reward functions {names}"
            )
        index = names.index(reward)
    elif required and len(names) == 1:
        index = 0
    else:
        return None
    return Correctness(index, names[index], float(value), float(weights[index]))


def scorable_rows(rewards_per_func: Tensor) -> Tensor:
    """[B] bool: rows where some reward function returned a value (TRL drops the others from
    its baseline and gives them advantage 0)."""
    return ~torch.isnan(rewards_per_func).all(dim=1)


def reward_totals(rewards_per_func: Tensor, weights: Tensor) -> Tensor:
    """[B] weighted sums of the reward functions, NaN (a function that returned None) counted
    as 0, as TRL's "sum_then_normalize" (a row where all are None sums to 0: see scorable_rows)."""
    return (rewards_per_func * weights.to(rewards_per_func)).nansum(dim=1)


def correct_rows(
    rewards_per_func: Tensor, correctness: Correctness | None, *, required: bool
) -> Tensor | None:
    """[B] bool: the rows the correctness reward calls correct; None without a correctness
    reward, or when its column is not binary (0 or correctness_value) on the scorable rows and
    `required` is False (the group-type metrics are then left out). Raises a one-line error
    naming the reward when it is required (LENS)."""
    if correctness is None:
        return None
    column = rewards_per_func[:, correctness.index]
    known = scorable_rows(rewards_per_func)
    values = column[known]
    if bool(((values == 0) | (values == correctness.value)).all()):
        return (column == correctness.value) & known
    if required:
        found = sorted({float(v) for v in values.unique()})[:6]
        raise ValueError(
            f"LENS needs a binary correctness reward: reward function '{correctness.name}' "
            f"returned {found}, not only 0 and correctness_value={correctness.value} (set "
            "correctness_reward / correctness_value to a 0-or-value reward function)"
        )
    return None


def group_rewards(
    rewards_per_func: Tensor,
    weights: Tensor,
    group_size: int,
    correctness: Correctness | None,
    *,
    required: bool,
    mean_logp_old: Tensor | None = None,
    lengths: Tensor | None = None,
) -> GroupRewards:
    """What groupwise's estimators see of a gathered generation batch (docs/algorithms.md §1-3).

    Args:
        rewards_per_func: [B, F] every process's rewards, one column per reward function.
        weights: [F] reward weights; the total is their weighted sum (reward_totals).
        group_size: G (TRL's num_generations).
        correctness: the correctness reward function, or None (then no row counts as correct
            and LENS is unavailable).
        required: whether the estimator needs binary correctness (LENS): correct_rows raises.
        mean_logp_old: [B] l(q, o) under the rollout policy (nats per token), where needed.
        lengths: [B] completion lengths in tokens (LENS's "sequence" difficulty).
    """
    totals = reward_totals(rewards_per_func, weights)
    correct = correct_rows(rewards_per_func, correctness, required=required)
    if correct is None:
        correct = torch.zeros_like(totals, dtype=torch.bool)
    column = None
    correct_reward = 1.0
    if correctness is not None:
        column = correctness.weight * rewards_per_func[:, correctness.index].nan_to_num(0.0)
        correct_reward = correctness.weight * correctness.value
    return GroupRewards(
        totals,
        correct,
        group_size,
        correctness=column,
        correct_reward=correct_reward,
        mean_logp_old=mean_logp_old,
        lengths=lengths,
    )


def group_fractions(correct: Tensor, advantages: Tensor, group_size: int) -> dict[str, float]:
    """Fractions of the batch's groups that are all correct, all wrong and mixed
    (docs/algorithms.md §3's group types), and that are all wrong yet have an advantage other
    than 0 (`groups/all_wrong_with_gradient`: LENS's calibrated negatives; 0 under GRPO),
    under TRL-style metric names. correct: [B] bool; advantages: [B]; group-major."""
    kinds = group_types(correct, group_size)
    fractions = {f"groups/{kind}": float(flags.float().mean()) for kind, flags in kinds.items()}
    moved = advantages.view(-1, group_size).ne(0).any(dim=1) & kinds["all_wrong"]
    fractions["groups/all_wrong_with_gradient"] = float(moved.float().mean())
    return fractions
