"""DAPO's decisions: which groups dynamic sampling keeps, the soft overlong punishment and AMIR
pairs without masked rows (groupwise.algorithms.group_filter and .overlong; docs/algorithms.md,
"Dynamic sampling" and "Overlong completions")."""

from __future__ import annotations

import pytest
import torch

from groupwise.algorithms import (
    AdvantageSettings,
    GroupRewards,
    PairSettings,
    constant_groups,
    get_advantage_estimator,
    group_targets,
    kept_groups,
    pairs_without,
    soft_overlong_punishment,
)

# Four groups of G = 3: all-correct, all-wrong, mixed, all-wrong with differing format rewards.
CORRECT = torch.tensor([1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0], dtype=torch.bool)
REWARDS = torch.tensor([1.5, 1.5, 1.5, 0.0, 0.0, 0.0, 1.5, 0.5, 0.0, 0.5, 0.0, 0.0])


def test_constant_groups():
    assert constant_groups(REWARDS, 3).tolist() == [True, True, False, False]
    assert constant_groups(torch.tensor([2.0, 2.0]), 2).tolist() == [True]
    with pytest.raises(ValueError, match="multiple of group_size"):
        constant_groups(torch.zeros(5), 3)


def test_kept_groups_per_metric():
    # correct (verl's acc): only the mixed group has both right and wrong answers
    assert kept_groups(CORRECT, REWARDS, 3, "correct").tolist() == [False, False, True, False]
    # reward (verl's score): the all-wrong group whose format rewards differ is kept too
    assert kept_groups(CORRECT, REWARDS, 3, "reward").tolist() == [False, False, True, True]
    # shaped (LENS): every group but the all-correct one has non-constant LENS rewards...
    assert kept_groups(CORRECT, REWARDS, 3, "shaped").tolist() == [False, True, True, True]
    # ... and under mixed_only the all-wrong groups get LENS advantage 0: dropped
    assert kept_groups(CORRECT, REWARDS, 3, "shaped", lens_mode="mixed_only").tolist() == [
        False,
        False,
        True,
        False,
    ]
    assert kept_groups(CORRECT, REWARDS, 3, "shaped", lens_mode="negative_only").tolist() == [
        False,
        True,
        True,
        True,
    ]


def test_shaped_metric_agrees_with_the_lens_advantages():
    # The groups the "shaped" filter drops are exactly those whose LENS advantages are all 0
    # (with distinct confidences in every group).
    mean_logp = torch.log(
        torch.tensor([0.9, 0.5, 0.3, 0.2, 0.6, 0.4, 0.7, 0.1, 0.5, 0.3, 0.8, 0.6])
    )
    batch = GroupRewards(CORRECT.float(), CORRECT, 3, mean_logp_old=mean_logp)
    lens = get_advantage_estimator("lens")
    for mode in ("full", "mixed_only", "negative_only"):
        advantages = lens.fn(batch, AdvantageSettings(lens_mode=mode)).advantages
        nonzero = (advantages.reshape(4, 3) != 0).any(dim=1)
        assert torch.equal(nonzero, kept_groups(CORRECT, CORRECT.float(), 3, "shaped", mode))


def test_kept_groups_rejects_bad_input():
    with pytest.raises(ValueError, match="metric='acc' is not one of correct, reward, shaped"):
        kept_groups(CORRECT, REWARDS, 3, "acc")
    with pytest.raises(ValueError, match="must match"):
        kept_groups(CORRECT, REWARDS[:6], 3)


def test_soft_overlong_punishment_hand_computed():
    # L_max = 10, buffer 4: 0 up to 6 tokens, then (6 - |o|)/4: 7 -> -0.25, 8 -> -0.5,
    # 10 -> -1; beyond the limit -1 (DAPO Eq. 13)
    lengths = torch.tensor([0, 3, 6, 7, 8, 10, 12])
    expected = torch.tensor([0.0, 0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    assert torch.allclose(soft_overlong_punishment(lengths, 10, 4), expected)
    # buffer = L_max: linear from 0 tokens
    assert torch.allclose(
        soft_overlong_punishment(torch.tensor([0, 5, 10]), 10, 10), torch.tensor([0.0, -0.5, -1])
    )
    with pytest.raises(ValueError, match=r"buffer must be in \[1, max_length=10\], got 11"):
        soft_overlong_punishment(lengths, 10, 11)


def test_pairs_without_drops_every_pair_touching_an_excluded_row():
    chosen, rejected = torch.tensor([0, 0, 3, 4]), torch.tensor([1, 2, 5, 5])
    excluded = torch.tensor([False, False, True, False, False, True])
    kept = pairs_without(chosen, rejected, excluded)
    assert kept[0].tolist() == [0] and kept[1].tolist() == [1]


def test_group_targets_unpaired_rows_form_no_pair_and_keep_their_advantages():
    # one group of 4: r = [1, 0, 0, 1], margin 0.5: pairs (0,1) (0,2) (3,1) (3,2); row 2 masked
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    batch = GroupRewards(rewards, rewards > 0.5, 4, mean_logp_old=torch.full((4,), -1.0))
    estimator, settings = get_advantage_estimator("grpo"), AdvantageSettings()
    plain = group_targets(batch, estimator, settings, PairSettings(0.5))
    masked = group_targets(
        batch, estimator, settings, PairSettings(0.5), unpaired=torch.tensor([0, 0, 1, 0]) > 0
    )
    assert sorted(zip(masked.chosen.tolist(), masked.rejected.tolist(), strict=True)) == [
        (0, 1),
        (3, 1),
    ]
    assert plain.num_pairs == 4
    # the masked row still counts in the group's statistics: the same advantages
    assert torch.equal(plain.advantages, masked.advantages)
    assert float(masked.coefficients[2]) == 0.0
