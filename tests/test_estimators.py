"""Advantage estimators by name (groupwise.algorithms.estimators; docs/algorithms.md §1 and §3)."""

from __future__ import annotations

import math

import pytest
import torch

from groupwise.algorithms import (
    ADVANTAGE_ESTIMATORS,
    Advantages,
    AdvantageSettings,
    GroupRewards,
    get_advantage_estimator,
    group_advantages,
    register_advantage_estimator,
)

EPS = 1e-4


def test_builtin_estimators_declare_what_they_need():
    assert get_advantage_estimator("grpo").needs_rollout_logp is False
    assert get_advantage_estimator("lens").needs_rollout_logp is True
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'; registered: .*grpo"):
        get_advantage_estimator("ppo")
    with pytest.raises(ValueError, match=r"'rlo' \(did you mean 'rloo'\?\); registered: "):
        get_advantage_estimator("rlo")


def test_grpo_estimator_is_group_advantages_with_the_settings():
    rewards = torch.tensor([3.0, 1.0, 0.0, 2.0])
    batch = GroupRewards(rewards, torch.zeros(4, dtype=torch.bool), group_size=2)
    for settings in (
        AdvantageSettings(),
        AdvantageSettings(scale="batch", std="population", eps=0.0),
        AdvantageSettings(scale="none"),
    ):
        result = get_advantage_estimator("grpo").fn(batch, settings)
        expected = group_advantages(
            rewards, 2, scale=settings.scale, eps=settings.eps, std=settings.std
        )
        torch.testing.assert_close(result.advantages, expected)
        assert result.rewards is rewards


def test_lens_estimator_binary_reward_hand_computed():
    # one mixed group: pbar (0.5, 0.4, 0.2, 0.8), rows 0 and 3 correct: rt = (1, -1/12, -1/28, 1)
    pbar = torch.tensor([0.5, 0.4, 0.2, 0.8], dtype=torch.float64)
    correct = torch.tensor([True, False, False, True])
    batch = GroupRewards(correct.double(), correct, group_size=4, mean_logp_old=pbar.log())
    result = get_advantage_estimator("lens").fn(batch, AdvantageSettings())
    rt = [1, -1 / 12, -1 / 28, 1]
    torch.testing.assert_close(result.rewards, torch.tensor(rt, dtype=torch.float64))
    mean = sum(rt) / 4
    std = math.sqrt(sum((v - mean) ** 2 for v in rt) / 3)
    expected = torch.tensor([(v - mean) / (std + EPS) for v in rt], dtype=torch.float64)
    torch.testing.assert_close(result.advantages, expected)


def test_lens_estimator_calibrates_the_correctness_inside_a_weighted_sum():
    # AMIR-style totals: correctness 2.0 x weight 1 plus 0.5 of format; a negative group, so
    # A = alpha (total' - mean total'), total' = total + 2.0 rt for the wrong answers.
    pbar = torch.tensor([0.5, 0.25, 0.1, 0.05], dtype=torch.float64)
    correct = torch.zeros(4, dtype=torch.bool)
    total = torch.tensor([0.5, 0.0, 0.5, 0.0], dtype=torch.float64)
    batch = GroupRewards(
        total,
        correct,
        group_size=4,
        correctness=torch.zeros(4, dtype=torch.float64),
        correct_reward=2.0,
        mean_logp_old=pbar.log(),
    )
    result = get_advantage_estimator("lens").fn(batch, AdvantageSettings(lens_alpha=0.25))
    rt = [-0.25, -0.25 / 3, -0.25 / 9, -0.25 / 19]  # D = 2 max pbar = 1
    calibrated = [t + 2.0 * r for t, r in zip(total.tolist(), rt, strict=True)]
    torch.testing.assert_close(result.rewards, torch.tensor(calibrated, dtype=torch.float64))
    mean = sum(calibrated) / 4
    torch.testing.assert_close(
        result.advantages,
        torch.tensor([0.25 * (c - mean) for c in calibrated], dtype=torch.float64),
    )
    with pytest.raises(ValueError, match="needs mean_logp_old"):
        get_advantage_estimator("lens").fn(GroupRewards(total, correct, 4), AdvantageSettings())


def test_register_an_estimator():
    @register_advantage_estimator("test_rank", needs_rollout_logp=False)
    def rank(batch: GroupRewards, settings: AdvantageSettings) -> Advantages:
        ranks = batch.rewards.view(-1, batch.group_size).argsort(dim=1).argsort(dim=1)
        return Advantages(ranks.reshape(-1).double() - (batch.group_size - 1) / 2, batch.rewards)

    try:
        estimator = get_advantage_estimator("test_rank")
        batch = GroupRewards(torch.tensor([0.3, 0.9, 0.1]), torch.zeros(3, dtype=torch.bool), 3)
        advantages = estimator.fn(batch, AdvantageSettings()).advantages
        assert advantages.tolist() == [0.0, 1.0, -1.0]
        with pytest.raises(ValueError, match="already registered"):
            register_advantage_estimator("test_rank")(rank)
    finally:
        del ADVANTAGE_ESTIMATORS["test_rank"]


def test_rloo_estimator_hand_computed():
    # group 1: r = [1, 0, 0, 1]: A_i = r_i - mean of the other three
    #   r=1: 1 - (0 + 0 + 1)/3 = 2/3;  r=0: 0 - (1 + 0 + 1)/3 = -2/3
    # group 2: r = [3, 1, 2, 2]: 3 - 5/3 = 4/3, 1 - 7/3 = -4/3, 2 - 2 = 0, 0
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 1.0, 2.0, 2.0])
    batch = GroupRewards(rewards, rewards > 0.5, group_size=4)
    result = get_advantage_estimator("rloo").fn(batch, AdvantageSettings())
    expected = torch.tensor([2, -2, -2, 2, 4, -4, 0, 0]) / 3
    assert torch.allclose(result.advantages, expected)
    assert torch.equal(result.rewards, rewards)  # AMIR mines pairs on the plain totals
    # properties: zero-sum per group; a constant group gets 0 (the dynamic-sampling case)
    assert torch.allclose(result.advantages.reshape(2, 4).sum(dim=1), torch.zeros(2))
    flat = GroupRewards(torch.full((3,), 0.7), torch.zeros(3, dtype=torch.bool), group_size=3)
    assert torch.equal(
        get_advantage_estimator("rloo").fn(flat, AdvantageSettings()).advantages, torch.zeros(3)
    )


def test_rloo_is_grpo_scaled_by_g_over_g_minus_1_without_std():
    rewards = torch.tensor([0.3, 1.7, -0.4, 2.2, 0.0, 5.0])
    batch = GroupRewards(rewards, torch.zeros(6, dtype=torch.bool), group_size=3)
    rloo = get_advantage_estimator("rloo").fn(batch, AdvantageSettings()).advantages
    assert torch.allclose(rloo, group_advantages(rewards, 3, scale="none") * 3 / 2)
    estimator = get_advantage_estimator("rloo")
    assert estimator.per_group and not estimator.needs_rollout_logp
    with pytest.raises(ValueError, match="group_size >= 2"):
        estimator.fn(GroupRewards(rewards, rewards > 1, group_size=1), AdvantageSettings())
