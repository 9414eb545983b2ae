"""Advantage estimators by name: what every engine calls at advantage time (docs/algorithms.md §1
and §3).

An engine (groupwise's trainer, TRL's GRPOTrainer, ...) gathers the rewards of whole groups,
looks the configured estimator up by name and calls it; it never branches on the method:

    estimator = get_advantage_estimator(name)          # "grpo" | "lens" | "rloo" |
                                                       # "reinforce_plus_plus_baseline" | ...
    if estimator.needs_rollout_logp: ...               # give it the rollout policy's l(q, o)
    if estimator.per_group: ...                        # or call it on any whole groups alone
    result = estimator.fn(batch, settings)             # result.advantages, result.rewards

`result.rewards` are the reward totals the advantages were computed from (LENS-calibrated
under "lens"); AMIR-GRPO mines its preference pairs on them (docs/algorithms.md §3, "AMIR-GRPO +
LENS together"). Register more with `@register_advantage_estimator("name")`, as verl's
`register_adv_est`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from groupwise.algorithms.advantages import (
    group_advantages,
    lens_advantages_from_rewards,
    lens_calibrated_total,
    lens_rewards,
)


@dataclass(frozen=True)
class AdvantageSettings:
    """Options of the built-in estimators (the config's `algorithm.*` of the same meaning).

    scale: GRPO's std, "group" | "batch" | "none" (Dr.GRPO). std: "unbiased" | "population".
    eps: added to the std. lens_alpha, lens_mode ("full" | "mixed_only" | "negative_only"),
    lens_difficulty ("pbar" | "sequence"): LENS, docs/algorithms.md §3.
    """

    scale: str = "group"
    std: str = "unbiased"
    eps: float = 1e-4
    lens_alpha: float = 0.25
    lens_mode: str = "full"
    lens_difficulty: str = "pbar"


@dataclass(frozen=True)
class GroupRewards:
    """What an estimator sees of a batch of whole groups (B rows, group-major).

    rewards: [B] weighted reward totals. correct: [B] bool binary correctness. group_size: G.
    correctness: [B] the correctness component's weighted contribution to rewards, which LENS
        replaces by its calibrated value; None means rewards are the binary correctness itself.
    correct_reward: that contribution for a correct answer (weight x correct value).
    mean_logp_old: [B] l(q, o) under the rollout policy (nats per token), for estimators that
        declare needs_rollout_logp. lengths: [B] completion lengths in tokens.
    """

    rewards: Tensor
    correct: Tensor
    group_size: int
    correctness: Tensor | None = None
    correct_reward: float = 1.0
    mean_logp_old: Tensor | None = None
    lengths: Tensor | None = None


@dataclass(frozen=True)
class Advantages:
    """advantages: [B], one per completion. rewards: [B] the totals they were computed from."""

    advantages: Tensor
    rewards: Tensor


EstimatorFn = Callable[[GroupRewards, AdvantageSettings], Advantages]
GapFn = Callable[[float, float, int], float]


@dataclass(frozen=True)
class AdvantageEstimator:
    """A named estimator and what it needs beyond rewards (the rollout policy's log-probs).

    needs_correctness: it reads the binary correctness of each completion (GroupRewards.correct
    and .correctness), so an engine must say which reward part is correctness (LENS).
    per_group: a group's advantages and rewards depend on that group's rows alone, under every
    setting, so an engine may call it on any subset of whole groups (our trainer then computes
    them micro-batch by micro-batch from the training pass, with no pass of their own).
    reward_gap: (largest gap of the reward totals, correct_reward, G) -> the largest gap of the
    totals it returns (AMIR mines pairs on them); None when unknown. Engines use it to refuse
    an AMIR margin no pair can exceed (targets.unreachable_margin_message).
    needs_lengths: it reads GroupRewards.lengths, so an engine must give the completion lengths.
    """

    name: str
    fn: EstimatorFn
    needs_rollout_logp: bool = False
    needs_correctness: bool = False
    per_group: bool = False
    reward_gap: GapFn | None = None
    needs_lengths: bool = False


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_advantage_estimator(
    name: str,
    *,
    needs_rollout_logp: bool = False,
    needs_correctness: bool = False,
    per_group: bool = False,
    reward_gap: GapFn | None = None,
    needs_lengths: bool = False,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator adding `fn(batch: GroupRewards, settings) -> Advantages` as `name`
    (AdvantageEstimator: what the flags and reward_gap declare)."""

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = AdvantageEstimator(
            name, fn, needs_rollout_logp, needs_correctness, per_group, reward_gap, needs_lengths
        )
        return fn

    return decorator


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The registered estimator `name`; an unknown name is an error naming the closest known
    one (difflib) and all of them."""
    if name not in ADVANTAGE_ESTIMATORS:
        known = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        close = difflib.get_close_matches(name, ADVANTAGE_ESTIMATORS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown advantage estimator {name!r}{hint}; registered: {known}")
    return ADVANTAGE_ESTIMATORS[name]


@register_advantage_estimator("grpo", reward_gap=lambda gap, correct_reward, g: gap)
def grpo_estimator(batch: GroupRewards, settings: AdvantageSettings) -> Advantages:
    """GRPO: group-normalised reward totals (docs/algorithms.md §1)."""
    advantages = group_advantages(
        batch.rewards, batch.group_size, scale=settings.scale, eps=settings.eps, std=settings.std
    )
    return Advantages(advantages, batch.rewards)


# LENS puts correct_reward x rt, in [-correct_reward / G, 0), in place of a wrong answer's 0
@register_advantage_estimator(
    "lens",
    needs_rollout_logp=True,
    needs_correctness=True,
    per_group=True,
    reward_gap=lambda gap, correct_reward, g: gap + abs(correct_reward) / g,
)
def lens_estimator(batch: GroupRewards, settings: AdvantageSettings) -> Advantages:
    """LENS (docs/algorithms.md §3): calibrated correctness rt from the rollout policy's
    confidences, put in place of the correctness component inside the reward total, then LENS's
    rules per group type (mixed: group-normalised; negative: alpha x de-meaned; all-correct: 0)."""
    if batch.mean_logp_old is None:
        raise ValueError("the lens estimator needs mean_logp_old (the rollout policy's l(q, o))")
    calibrated = lens_rewards(
        batch.correct,
        batch.mean_logp_old,
        batch.group_size,
        difficulty=settings.lens_difficulty,
        lengths=batch.lengths,
    )
    correctness = batch.rewards if batch.correctness is None else batch.correctness
    totals = lens_calibrated_total(
        batch.rewards, correctness, batch.correct, calibrated, batch.correct_reward
    )
    advantages = lens_advantages_from_rewards(
        totals,
        batch.rewards,
        batch.correct,
        batch.group_size,
        alpha=settings.lens_alpha,
        mode=settings.lens_mode,
        eps=settings.eps,
        std=settings.std,
    )
    return Advantages(advantages, totals)


@register_advantage_estimator("rloo", per_group=True, reward_gap=lambda gap, correct_reward, g: gap)
def rloo_estimator(batch: GroupRewards, settings: AdvantageSettings) -> Advantages:
    """RLOO (docs/algorithms.md, "RLOO"): each completion's reward minus the mean of the
    other G - 1 of its group, A_i = r_i - (sum_j r_j - r_i) / (G - 1) = G / (G - 1) (r_i -
    mean_j r_j); no std scaling."""
    if batch.group_size < 2:
        raise ValueError("the rloo estimator needs group_size >= 2 (a leave-one-out baseline)")
    centred = group_advantages(batch.rewards, batch.group_size, scale="none")
    return Advantages(centred * batch.group_size / (batch.group_size - 1), batch.rewards)


# verl's masked_whiten and OpenRLHF add 1e-8 to the variance (not to the std, as GRPO's eps)
WHITEN_EPS = 1e-8


@register_advantage_estimator(
    "reinforce_plus_plus_baseline",
    reward_gap=lambda gap, correct_reward, g: gap,
    needs_lengths=True,
)
def reinforce_plus_plus_baseline_estimator(
    batch: GroupRewards, settings: AdvantageSettings
) -> Advantages:
    """REINFORCE++-baseline (docs/algorithms.md, "REINFORCE++-baseline"): each reward minus its
    group's mean (a group of one: minus 0), then whitened over the whole batch,
    A_i = (a_i - mu) / sqrt(var + 1e-8), with mu and var over the batch's completion tokens
    (each completion weighted by its length batch.lengths, as verl's and OpenRLHF's
    token-level whitening); var with n - 1 (settings.std "unbiased", n the number of tokens)
    or n ("population")."""
    if batch.lengths is None:
        raise ValueError("the reinforce_plus_plus_baseline estimator needs lengths")
    dtype = batch.rewards.dtype if batch.rewards.is_floating_point() else torch.float32
    centred = batch.rewards.to(dtype)
    if batch.group_size > 1:
        centred = group_advantages(centred, batch.group_size, scale="none")
    weights = batch.lengths.to(dtype)
    count = weights.sum()
    mean = (weights * centred).sum() / count.clamp(min=1e-8)
    var = (weights * (centred - mean) ** 2).sum() / count.clamp(min=1e-8)
    if settings.std == "unbiased":
        if count <= 1:
            raise ValueError("reinforce_plus_plus_baseline's unbiased variance needs > 1 token")
        var = var * count / (count - 1)
    advantages = (centred - mean) / torch.sqrt(var + WHITEN_EPS)
    return Advantages(advantages.to(dtype), batch.rewards)
