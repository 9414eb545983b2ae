"""group_targets (the advantage-time sequence every engine calls), AlgorithmOptions (the shared
options) and the warnings that keep AMIR from being silently absent (docs/algorithms.md §1-3)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from groupwise.algorithms import (
    AdaptiveLambda,
    AdvantageSettings,
    AlgorithmOptions,
    GroupRewards,
    PairlessWarning,
    PairSettings,
    get_advantage_estimator,
    group_targets,
    largest_reward_gap,
    mine_pairs,
    preference_coefficients,
    unreachable_margin,
)
from groupwise.config import ConfigError
from groupwise.train.preflight import load_run_config

# two groups of G = 3: mixed (1 0 0 with a bonus) and all wrong
REWARDS = torch.tensor([1.2, 0.3, 0.0, 0.4, 0.1, 0.0])
CORRECT = torch.tensor([True, False, False, False, False, False])
L_OLD = torch.tensor([-0.2, -1.0, -0.6, -0.5, -0.9, -1.4])


def batch(**extra) -> GroupRewards:
    return GroupRewards(
        REWARDS,
        CORRECT,
        3,
        correctness=CORRECT.float(),
        correct_reward=1.0,
        mean_logp_old=L_OLD,
        **extra,
    )


@pytest.mark.parametrize("estimator", ["grpo", "lens"])
def test_group_targets_is_the_estimator_then_pairs_on_its_totals_then_coefficients(estimator):
    est, settings = get_advantage_estimator(estimator), AdvantageSettings()
    pairs = PairSettings(margin=0.15, mode="all", beta=0.5)
    targets = group_targets(batch(), est, settings, pairs)

    result = est.fn(batch(), settings)
    chosen, rejected = mine_pairs(result.rewards, 3, 0.15)
    terms = preference_coefficients(L_OLD, None, chosen, rejected, 0.5)
    assert torch.equal(targets.advantages, result.advantages)
    assert torch.equal(targets.rewards, result.rewards)
    assert (targets.chosen.tolist(), targets.rejected.tolist()) == (
        chosen.tolist(),
        rejected.tolist(),
    )
    assert torch.equal(targets.coefficients, terms.coefficients)
    if estimator == "grpo":
        # by hand: gaps above 0.15 are (0,1) (0,2) (1,2) in group 0, (3,4) (3,5) in group 1
        assert list(zip(chosen.tolist(), rejected.tolist(), strict=True)) == [
            (0, 1),
            (0, 2),
            (1, 2),
            (3, 4),
            (3, 5),
        ]
        # row 1 is rejected in (0, 1) and chosen in (1, 2): c_1 = (beta / P) [s(-z01) - s(-z12)]
        z01, z12 = 0.5 * (-0.2 - -1.0), 0.5 * (-1.0 - -0.6)
        expected = 0.5 / 5 * (1 / (1 + math.exp(z01)) - 1 / (1 + math.exp(z12)))
        assert float(targets.coefficients[1]) == pytest.approx(expected, rel=1e-6)
    # the coefficients sum to 0 (each pair adds +w and -w)
    assert float(targets.coefficients.sum()) == pytest.approx(0.0, abs=1e-7)


def test_coefficients_later_and_of_a_part_add_up_to_the_whole() -> None:
    est, settings = get_advantage_estimator("grpo"), AdvantageSettings()
    pairs = PairSettings(margin=0.05, beta=0.5)
    whole = group_targets(batch(), est, settings, pairs)
    later = group_targets(batch(), est, settings, pairs, coefficients=False)
    assert later.coefficients is None and later.num_pairs == whole.num_pairs
    parts = [
        later.select(torch.arange(s, s + 3)).with_coefficients(
            L_OLD[s : s + 3], None, 0.5, num_pairs=whole.num_pairs
        )
        for s in (0, 3)
    ]
    torch.testing.assert_close(torch.cat([p.coefficients for p in parts]), whole.coefficients)
    assert sum(p.num_pairs for p in parts) == whole.num_pairs
    second = later.select(torch.arange(3, 6))
    assert second.chosen.min() >= 0 and second.chosen.max() < 3  # re-indexed into the part


def test_unscorable_rows_leave_their_group_out() -> None:
    est = get_advantage_estimator("lens")
    scorable = torch.tensor([True, True, True, True, False, True])
    targets = group_targets(
        batch(), est, AdvantageSettings(), PairSettings(margin=0.05), scorable=scorable
    )
    alone = group_targets(
        GroupRewards(
            REWARDS[:3], CORRECT[:3], 3, correctness=CORRECT[:3].float(), mean_logp_old=L_OLD[:3]
        ),
        est,
        AdvantageSettings(),
        PairSettings(margin=0.05),
    )
    assert targets.advantages[3:].tolist() == [0.0, 0.0, 0.0]
    assert targets.advantages[:3].tolist() == alone.advantages.tolist()
    assert bool((targets.chosen < 3).all()) and targets.num_pairs == alone.num_pairs


def test_the_largest_reward_gap_and_a_margin_above_it() -> None:
    grpo, lens = get_advantage_estimator("grpo"), get_advantage_estimator("lens")
    # AMIR-GRPO's official reward: correctness 2 + format 0.5 + integer 0.2 + tags 0.275 + 1
    official = [(0, 2.0), (0, 0.5), (0, 0.2), (-0.075, 0.2), (0, 1.0)]
    assert largest_reward_gap(official, [1.0] * 5) == pytest.approx(3.975)
    assert largest_reward_gap([(0, 1.0), None], [1.0, 1.0]) is None
    assert unreachable_margin(2.0, grpo, official, [1.0] * 5, 2.0, 8) is None
    binary = [(0.0, 1.0)]
    assert unreachable_margin(0.99, grpo, binary, [1.0], 1.0, 8) is None
    assert "margin=1 is not below 1," in unreachable_margin(1.0, grpo, binary, [1.0], 1.0, 8)
    # LENS gives a wrong answer down to -correct_reward / G
    assert unreachable_margin(1.1, lens, binary, [1.0], 1.0, 8) is None
    assert "1.125" in unreachable_margin(1.125, lens, binary, [1.0], 1.0, 8)
    assert unreachable_margin(5.0, grpo, [None], [1.0], 1.0, 8) is None  # unknowable


def test_our_config_refuses_a_margin_no_pair_can_exceed() -> None:
    with pytest.raises(ConfigError, match=r"algorithm.margin=1 is not below 1"):
        load_run_config(
            None,
            [
                "algorithm.amir=true",
                "algorithm.margin=1.0",
                "reward.weights={binary: 1.0}",
                "reward.correctness_component=binary",
            ],
        )
    load_run_config(
        None,
        [
            "algorithm.amir=true",
            "algorithm.margin=0.5",
            "reward.weights={binary: 1.0}",
            "reward.correctness_component=binary",
        ],
    )


def test_a_batch_without_pairs_but_with_differing_rewards_is_warned_about_once() -> None:
    watch = PairlessWarning(margin=2.0, option="algorithm.margin")
    est = get_advantage_estimator("grpo")
    equal = GroupRewards(torch.zeros(6), torch.zeros(6, dtype=torch.bool), 3)
    pairs = PairSettings(2.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch.observe(group_targets(equal, est, AdvantageSettings(), pairs, coefficients=False), 3)
        assert not caught  # no group has differing rewards: nothing to say yet
        for _ in range(3):
            watch.observe(group_targets(batch(), est, AdvantageSettings(), pairs), 3)
    (said,) = caught
    assert "in 2 group(s) whose rewards differ" in str(said.message)
    assert "largest reward gap in such a group was 1.2" in str(said.message)


def _binary_lens_batch(correct: list[bool], l_old: list[float], group_size: int) -> GroupRewards:
    """Rewards that are the binary correctness alone (the README's AMIR + LENS example)."""
    binary = torch.tensor(correct, dtype=torch.float32)
    return GroupRewards(
        binary,
        torch.tensor(correct),
        group_size,
        correctness=binary,
        correct_reward=1.0,
        mean_logp_old=torch.tensor(l_old),
    )


def test_groups_that_differ_only_by_lens_penalties_are_not_warned_about() -> None:
    # every group all wrong: the totals AMIR mines on differ only by LENS's penalties, each in
    # [-1/G, 0), so no pair at amir_margin=0.5, and none is meant: "lower amir_margin" would pair
    # wrong answers by the model's confidence (docs/algorithms.md, "AMIR-GRPO + LENS together")
    lens = get_advantage_estimator("lens")
    l_old = [-0.1, -0.5, -1.0, -2.0, -0.3, -0.3, -0.7, -1.5]
    rewards = _binary_lens_batch([False] * 8, l_old, 4)
    targets = group_targets(rewards, lens, AdvantageSettings(), PairSettings(0.5))
    assert targets.num_pairs == 0
    assert torch.equal(targets.unshaped_rewards, torch.zeros(8))
    pbar = [math.exp(v) for v in l_old[:4]]
    # rt_i = -(1/G) pbar_i / (D - pbar_i), D = 2 max pbar: from -1/4 (the most confident) up
    assert float(targets.rewards[:4].max() - targets.rewards[:4].min()) == pytest.approx(
        0.25 - 0.25 * pbar[3] / (2 * pbar[0] - pbar[3])
    )
    watch = PairlessWarning(margin=0.5, option="amir_margin")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch.observe(targets, 4)
        watch.observe(targets.select(torch.arange(4)), 4)
    assert not watch.warned


def test_a_mixed_group_without_a_pair_is_warned_about_beside_lens_only_groups() -> None:
    # a mixed group whose gap (1 + a small LENS penalty) is not above the margin: lowering the
    # margin is the right advice; the all-wrong group is named apart, not counted
    lens = get_advantage_estimator("lens")
    correct = [True, False, False, False] + [False] * 4
    l_old = [-0.1, -3.0, -3.0, -3.0, -0.1, -0.5, -1.0, -2.0]
    targets = group_targets(
        _binary_lens_batch(correct, l_old, 4), lens, AdvantageSettings(), PairSettings(1.2)
    )
    assert targets.num_pairs == 0
    gap = float(targets.rewards[:4].max() - targets.rewards[:4].min())
    assert 1.0 < gap < 1.2
    watch = PairlessWarning(margin=1.2, option="amir_margin")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch.observe(targets, 4)
    (said,) = caught
    assert str(said.message) == (
        "AMIR-GRPO mined no preference pair in 1 group(s) whose rewards differ (1 more group(s) "
        "differ only by the estimator's shaping, LENS's penalties of wrong answers, which "
        f"AMIR-GRPO is not meant to pair): the largest reward gap in such a group was {gap:.4g}, "
        "not above amir_margin=1.2; AMIR's term is absent until a gap exceeds it. Lower "
        "amir_margin below the reward's gaps (this warning is shown once)"
    )


def test_lambda_at_a_bound_is_warned_about_once_after_20_updates() -> None:
    lam = AdaptiveLambda()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = [lam.update_from_ratio(10.0) for _ in range(40)]
    assert values[:4] == pytest.approx([0.008, 0.0064, 0.00512, 0.005])
    assert lam.bound_streak == 37
    (said,) = caught
    assert "floor 0.005 for 20 consecutive updates" in str(said.message)
    lam.update_from_ratio(0.0)  # leaves the bound: the streak starts again
    assert lam.bound_streak == 0


def test_options_name_the_option_the_user_typed() -> None:
    with pytest.raises(ValueError, match=r"^amir_margin must be >= 0, got -1.0$"):
        AlgorithmOptions(margin=-1.0).check({"margin": "amir_margin"}.get)
    with pytest.raises(ValueError, match=r"algorithm.lens_mode='x' is not one of full, mixed_only"):
        AlgorithmOptions(lens_mode="x").check(lambda n: f"algorithm.{n}")
    with pytest.raises(ValueError, match=r"advantage: unknown advantage estimator 'nope'"):
        AlgorithmOptions(advantage="nope").check()
    with pytest.raises(ValueError, match=r"lambda_init must lie in \[lambda_min, lambda_max\]"):
        AlgorithmOptions(lambda_init=0.5).check()
    options = AlgorithmOptions(amir=True, margin=0.3, lens_alpha=0.1, lambda_measure="fixed")
    assert options.pair_settings() == PairSettings(0.3, "all", None, 0.5)
    assert options.adaptive_lambda().measure == "fixed"
    assert options.advantage_settings(scale="none").lens_alpha == 0.1
    assert AlgorithmOptions().pair_settings() is None
    assert AlgorithmOptions().adaptive_lambda() is None
