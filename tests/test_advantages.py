"""GRPO and LENS advantages (docs/algorithms.md §1 and §3)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwise.algorithms import (
    group_advantages,
    group_types,
    lens_advantages,
    lens_advantages_from_rewards,
    lens_calibrated_total,
    lens_rewards,
)

EPS = 1e-4


def _pstd(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _ustd(values: list[float]) -> float:
    """The unbiased (n - 1) std, the default of docs/algorithms.md §1."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


# --- hypothesis strategies: a batch of groups with binary correctness and confidences ----


@st.composite
def lens_batches(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, int]:
    group_size = draw(st.integers(2, 6))
    groups = draw(st.integers(1, 4))
    size = group_size * groups
    correct = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    # mean token log-probs from near-certain (-0.001) to very unlikely (-30 nats per token)
    mean_logp = draw(
        st.lists(st.floats(-30.0, -1e-3, allow_nan=False), min_size=size, max_size=size)
    )
    return (
        torch.tensor(correct),
        torch.tensor(mean_logp, dtype=torch.float64),
        group_size,
    )


# --- group_advantages ----------------------------------------------------------------------


def test_group_advantages_hand_computed_scales():
    rewards = torch.tensor([3.0, 1.0, 0.0, 2.0], dtype=torch.float64)
    # groups (3, 1) and (0, 2): means 2 and 1, unbiased stds sqrt((1 + 1) / 1) = sqrt(2)
    expected_group = torch.tensor([1, -1, -1, 1], dtype=torch.float64) / (math.sqrt(2) + EPS)
    torch.testing.assert_close(group_advantages(rewards, 2), expected_group)
    # population stds are 1
    torch.testing.assert_close(
        group_advantages(rewards, 2, std="population"),
        torch.tensor([1, -1, -1, 1], dtype=torch.float64) / (1.0 + EPS),
    )
    # batch std of (3, 1, 0, 2): mean 1.5, squared deviations sum to 5: unbiased var 5/3,
    # population var 5/4
    expected_batch = torch.tensor([1, -1, -1, 1], dtype=torch.float64) / (math.sqrt(5 / 3) + EPS)
    torch.testing.assert_close(group_advantages(rewards, 2, scale="batch"), expected_batch)
    torch.testing.assert_close(
        group_advantages(rewards, 2, scale="batch", std="population"),
        torch.tensor([1, -1, -1, 1], dtype=torch.float64) / (math.sqrt(1.25) + EPS),
    )
    # no division (Dr.GRPO): just centred, whatever the std
    for std in ("unbiased", "population"):
        torch.testing.assert_close(
            group_advantages(rewards, 2, scale="none", std=std),
            torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64),
        )


def test_group_advantages_binary_group_of_four():
    # r = (1, 0, 0, 1): mean 0.5, unbiased std sqrt(1/3) = 0.577 (population: 0.5)
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 4)
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5]) / (math.sqrt(1 / 3) + EPS)
    torch.testing.assert_close(adv, expected)


def test_population_std_scales_advantages_by_sqrt_g_over_g_minus_1():
    # docs/algorithms.md §1: at G = 8 the population std makes every advantage 1.069x larger
    # (sqrt(8/7)), at G = 16 1.033x (sqrt(16/15)); eps = 0 isolates the factor.
    for group_size, factor in ((8, 1.0690), (16, 1.0328)):
        rewards = torch.arange(group_size, dtype=torch.float64) % 3
        unbiased = group_advantages(rewards, group_size, eps=0.0)
        population = group_advantages(rewards, group_size, eps=0.0, std="population")
        ratio = population / unbiased
        torch.testing.assert_close(ratio, torch.full_like(ratio, factor), atol=1e-4, rtol=0)


def test_group_advantages_int_and_bool_rewards_become_float():
    adv = group_advantages(torch.tensor([True, False]), 2)
    assert adv.dtype == torch.get_default_dtype()
    # unbiased std of (1, 0): sqrt(0.5)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5]) / (math.sqrt(0.5) + EPS))


@settings(max_examples=30, deadline=None)
@given(
    group_size=st.integers(2, 6),
    groups=st.integers(1, 4),
    data=st.data(),
    scale=st.sampled_from(["group", "batch", "none"]),
)
def test_group_advantages_zero_mean_per_group(group_size, groups, data, scale):
    values = data.draw(
        st.lists(
            st.floats(-5, 5, allow_nan=False),
            min_size=group_size * groups,
            max_size=group_size * groups,
        )
    )
    adv = group_advantages(torch.tensor(values, dtype=torch.float64), group_size, scale=scale)
    sums = adv.view(groups, group_size).sum(dim=1)
    torch.testing.assert_close(sums, torch.zeros(groups, dtype=torch.float64), atol=1e-6, rtol=0)
    # the (unbiased) std of a group's advantages is std / (std + eps) <= 1 with scale="group"
    if scale == "group":
        assert bool((adv.view(groups, group_size).std(dim=1) <= 1.0).all())


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_all_equal_group_gives_zero(scale):
    rewards = torch.tensor([0.7, 0.7, 0.7, 2.0, 0.0, 0.5])
    adv = group_advantages(rewards, 3, scale=scale)
    assert torch.equal(adv[:3], torch.zeros(3))
    assert bool((adv[3:] != 0).all())


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="multiple of group_size=4"):
        group_advantages(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="scale='mean' is not one of group, batch, none"):
        group_advantages(torch.zeros(4), 2, scale="mean")
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(torch.zeros(2, 2), 2)
    with pytest.raises(ValueError, match="NaN"):
        group_advantages(torch.tensor([0.0, math.nan]), 2)
    with pytest.raises(ValueError, match="group_size must be a positive int"):
        group_advantages(torch.zeros(4), 0)
    with pytest.raises(ValueError, match="std='sample' is not one of unbiased, population"):
        group_advantages(torch.zeros(4), 2, std="sample")
    with pytest.raises(ValueError, match="needs group_size >= 2"):
        group_advantages(torch.zeros(4), 1)


# --- group_types ---------------------------------------------------------------------------


def test_group_types():
    correct = torch.tensor([1, 1, 0, 0, 0, 1, 1, 1])
    types = group_types(correct, 2)
    assert types["all_correct"].tolist() == [True, False, False, True]
    assert types["all_wrong"].tolist() == [False, True, False, False]
    assert types["mixed"].tolist() == [False, False, True, False]
    with pytest.raises(ValueError, match="0/1"):
        group_types(torch.tensor([0.0, 0.5]), 2)


# --- lens_rewards --------------------------------------------------------------------------


def test_lens_rewards_hand_computed():
    pbar = torch.tensor(
        [0.5, 0.4, 0.2, 0.8, 0.5, 0.25, 0.1, 0.05, 0.9, 0.1, 0.1, 0.1, 0.9, 0.9, 0.9, 0.9],
        dtype=torch.float64,
    )
    correct = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1])
    rt = lens_rewards(correct, pbar.log(), 4)
    # group 0 (mixed): D_imp = 4 / (1/0.5 + 1/0.8) = 4 / 3.25 = 1.2308; 2 max pbar = 1.6 -> D = 1.6
    #   rt_1 = -(1/4) 0.4 / (1.6 - 0.4) = -1/12;  rt_2 = -(1/4) 0.2 / 1.4 = -1/28
    # group 1 (negative): D = 2 * 0.5 = 1.0
    #   rt = -(1/4) * (0.5/0.5, 0.25/0.75, 0.1/0.9, 0.05/0.95)
    # group 2 (mixed, D_imp wins): D_imp = 4 / (1/0.9) = 3.6 > 2 * 0.9 = 1.8 -> D = 3.6
    #   rt_wrong = -(1/4) 0.1 / 3.5 = -1/140
    # group 3 (all correct): all 1
    expected = torch.tensor(
        [
            *(1, -1 / 12, -1 / 28, 1),
            *(-0.25, -0.25 / 3, -0.25 / 9, -0.25 / 19),
            *(1, -1 / 140, -1 / 140, -1 / 140),
            *(1, 1, 1, 1),
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(rt, expected)


def test_lens_rewards_are_detached_and_stable_at_tiny_confidence():
    mean_logp = torch.tensor([-1000.0, -2000.0, -3000.0, -1000.5], requires_grad=True)
    rt = lens_rewards(torch.tensor([0, 0, 1, 0]), mean_logp, 4)
    assert rt.grad_fn is None
    assert bool(torch.isfinite(rt).all())
    # pbar = exp(-1000) underflows to 0 in float32, the rule is evaluated in log space:
    # D_imp = 4 exp(-3000) << 2 max pbar = 2 exp(-1000), so D = 2 exp(-1000) and the most
    # confident mistake (-1000) gets u = 1/2, rt_0 = -(1/4) (1/2) / (1/2) = -1/4 exactly.
    assert rt[0].item() == -0.25
    # rt_3: u = exp(-0.5)/2, -(1/4) u/(1-u)
    u = math.exp(-0.5) / 2
    assert rt[3].item() == pytest.approx(-0.25 * u / (1 - u), rel=1e-5)
    assert rt[2].item() == 1.0


@settings(max_examples=40, deadline=None)
@given(batch=lens_batches())
def test_lens_rewards_bounds_and_confidence_order(batch):
    correct, mean_logp, group_size = batch
    rt = lens_rewards(correct, mean_logp, group_size)
    assert bool((rt[correct] == 1).all())
    wrong = rt[~correct]
    assert bool((wrong >= -1.0 / group_size - 1e-12).all())
    assert bool((wrong < 0).all())
    # within a group, a more confident mistake gets a more negative (or equal) reward
    rt_g, lp_g, c_g = (x.view(-1, group_size) for x in (rt, mean_logp, correct))
    for g in range(rt_g.shape[0]):
        for i in range(group_size):
            for j in range(group_size):
                if not c_g[g, i] and not c_g[g, j] and lp_g[g, i] > lp_g[g, j]:
                    assert rt_g[g, i] <= rt_g[g, j]
        if not bool(c_g[g].any()):
            # negative group: D = 2 max pbar, so the most confident mistake gets exactly -1/G
            assert rt_g[g].min().item() == pytest.approx(-1.0 / group_size, rel=1e-9)


# --- lens_advantages -----------------------------------------------------------------------


def test_lens_advantages_hand_computed():
    pbar = torch.tensor([0.5, 0.4, 0.2, 0.8, 0.5, 0.25, 0.1, 0.05, 0.9, 0.9, 0.9, 0.9])
    correct = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1])
    adv = lens_advantages(correct.bool(), pbar.log().double(), 4, alpha=0.25)
    # mixed group: rt = (1, -1/12, -1/28, 1) GRPO-normalised with the unbiased std + 1e-4
    rt = [1, -1 / 12, -1 / 28, 1]
    mean, std = sum(rt) / 4, _ustd(rt)
    mixed = [(r - mean) / (std + EPS) for r in rt]
    # negative group: rt = -(1/4)(1, 1/3, 1/9, 1/19), A = 0.25 (rt - mean rt)
    rt_neg = [-0.25, -0.25 / 3, -0.25 / 9, -0.25 / 19]
    mean_neg = sum(rt_neg) / 4
    negative = [0.25 * (r - mean_neg) for r in rt_neg]
    expected = torch.tensor([*mixed, *negative, 0, 0, 0, 0], dtype=torch.float64)
    torch.testing.assert_close(adv, expected)
    # e.g. the most confident mistake: 0.25 * (-0.25 + 0.093567) = -0.039108
    assert adv[4].item() == pytest.approx(-0.039108, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(batch=lens_batches(), alpha=st.sampled_from([0.1, 0.25, 1.0]))
def test_lens_advantages_properties(batch, alpha):
    correct, mean_logp, group_size = batch
    adv = lens_advantages(correct, mean_logp, group_size, alpha=alpha).view(-1, group_size)
    grpo = group_advantages(correct.double(), group_size).view(-1, group_size)
    types = group_types(correct, group_size)
    torch.testing.assert_close(
        adv.sum(dim=1), torch.zeros(adv.shape[0], dtype=torch.float64), atol=1e-9, rtol=0
    )
    # mixed groups keep the sign of every plain-GRPO advantage
    assert torch.equal(torch.sign(adv[types["mixed"]]), torch.sign(grpo[types["mixed"]]))
    # negative groups: |A| = alpha |rt - mean rt| < alpha / G, since rt lies in [-1/G, 0)
    assert bool((adv[types["all_wrong"]].abs() < alpha / group_size).all())
    assert bool((adv[types["all_correct"]] == 0).all())


def test_lens_ablation_modes():
    pbar = torch.tensor([0.5, 0.4, 0.2, 0.8, 0.5, 0.25, 0.1, 0.05], dtype=torch.float64)
    correct = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0])
    full = lens_advantages(correct, pbar.log(), 4)
    mixed_only = lens_advantages(correct, pbar.log(), 4, mode="mixed_only")
    negative_only = lens_advantages(correct, pbar.log(), 4, mode="negative_only")
    # mixed_only: negative group silenced, mixed group as full
    torch.testing.assert_close(mixed_only[:4], full[:4])
    assert torch.equal(mixed_only[4:], torch.zeros(4, dtype=torch.float64))
    # negative_only: plain binary GRPO in the mixed group: +-0.5 / (sqrt(1/3) + 1e-4)
    torch.testing.assert_close(
        negative_only[:4],
        torch.tensor([0.5, -0.5, -0.5, 0.5], dtype=torch.float64) / (math.sqrt(1 / 3) + EPS),
    )
    torch.testing.assert_close(negative_only[4:], full[4:])
    # full mode differs from plain GRPO in the mixed group: the less confident mistake
    # (pbar 0.2) is punished less than the more confident one (pbar 0.4)
    assert full[2] > full[1]


def test_lens_advantages_from_rewards_hand_computed():
    calibrated = torch.tensor([3.2, 0.5, 1.0, 0.1, 0.7, 0.2, 0.3, 0.0], dtype=torch.float64)
    plain = torch.tensor([4.0, 0.5, 1.0, 0.0, 0.7, 0.2, 0.3, 0.0], dtype=torch.float64)
    correct = torch.tensor([True, False, False, False, False, False, False, False])
    adv = lens_advantages_from_rewards(calibrated, plain, correct, 4, alpha=0.25)
    # mixed group: GRPO of calibrated (3.2, 0.5, 1.0, 0.1)
    values = [3.2, 0.5, 1.0, 0.1]
    mean, std = sum(values) / 4, _ustd(values)
    mixed = [(v - mean) / (std + EPS) for v in values]
    # negative group: mean (0.7 + 0.2 + 0.3 + 0) / 4 = 0.3; 0.25 * (0.4, -0.1, 0, -0.3)
    negative = [0.1, -0.025, 0.0, -0.075]
    torch.testing.assert_close(adv, torch.tensor(mixed + negative, dtype=torch.float64))
    # negative_only: the mixed group normalises plain (4, 0.5, 1, 0) instead
    adv_neg_only = lens_advantages_from_rewards(calibrated, plain, correct, 4, mode="negative_only")
    values = [4.0, 0.5, 1.0, 0.0]
    mean, std = sum(values) / 4, _ustd(values)
    torch.testing.assert_close(
        adv_neg_only[:4],
        torch.tensor([(v - mean) / (std + EPS) for v in values], dtype=torch.float64),
    )
    torch.testing.assert_close(adv_neg_only[4:], torch.tensor(negative, dtype=torch.float64))
    # plain is only needed for negative_only
    torch.testing.assert_close(
        lens_advantages_from_rewards(calibrated, None, correct, 4, alpha=0.25), adv
    )


def test_lens_errors():
    correct = torch.tensor([1, 0, 0, 0])
    logp = torch.full((4,), -1.0)
    with pytest.raises(ValueError, match="mode='both' is not one of full, mixed_only"):
        lens_advantages(correct, logp, 2, mode="both")
    with pytest.raises(ValueError, match="alpha must be a number >= 0"):
        lens_advantages(correct, logp, 2, alpha=-0.1)
    with pytest.raises(ValueError, match="needs the plain"):
        lens_advantages_from_rewards(logp, None, correct, 2, mode="negative_only")
    with pytest.raises(ValueError, match="multiple of group_size=3"):
        lens_rewards(correct, logp, 3)
    with pytest.raises(ValueError, match="must match"):
        lens_rewards(correct, torch.full((6,), -1.0), 2)
    with pytest.raises(ValueError, match="NaN or infinite"):
        lens_rewards(correct, torch.tensor([-1.0, -math.inf, -1.0, -1.0]), 2)
    with pytest.raises(ValueError, match="0/1"):
        lens_rewards(torch.tensor([2, 0, 0, 0]), logp, 2)


def test_lens_mixed_groups_use_the_chosen_std():
    calibrated = torch.tensor([3.2, 0.5, 1.0, 0.1], dtype=torch.float64)
    correct = torch.tensor([True, False, False, False])
    values = calibrated.tolist()
    mean = sum(values) / 4
    for std, spread in (("unbiased", _ustd(values)), ("population", _pstd(values))):
        adv = lens_advantages_from_rewards(calibrated, None, correct, 4, std=std)
        expected = torch.tensor([(v - mean) / (spread + EPS) for v in values], dtype=torch.float64)
        torch.testing.assert_close(adv, expected)


# --- LENS difficulty from the raw sequence probability (Eq. 14 as typeset) ------------------


def test_lens_rewards_sequence_difficulty_hand_computed():
    # one mixed group: the correct completion has pbar 0.9, the three mistakes pbar 0.1
    pbar = torch.tensor([0.9, 0.1, 0.1, 0.1], dtype=torch.float64)
    correct = torch.tensor([1, 0, 0, 0])

    def rewards(correct_length: int) -> torch.Tensor:
        lengths = torch.tensor([correct_length, 7, 7, 7])
        return lens_rewards(correct, pbar.log(), 4, difficulty="sequence", lengths=lengths)

    def mistakes(d: float) -> torch.Tensor:
        return torch.full((3,), -0.25 * 0.1 / (d - 0.1), dtype=torch.float64)

    # |o| = 1: the sequence probability is pbar: D_imp = 4 / (1/0.9) = 3.6 > 1.8 = 2 max pbar
    torch.testing.assert_close(rewards(1), lens_rewards(correct, pbar.log(), 4))
    torch.testing.assert_close(rewards(1)[1:], mistakes(3.6))
    # |o| = 2: P = 0.81, D_imp = 4 * 0.81 = 3.24 still above the floor
    torch.testing.assert_close(rewards(2)[1:], mistakes(3.24))
    # |o| = 10: P = 0.9^10 = 0.3487, D_imp = 1.395 < 1.8: the floor D = 2 max pbar wins
    torch.testing.assert_close(rewards(10)[1:], mistakes(1.8))
    # the mistakes' lengths never enter (only correct completions make D_imp)
    assert rewards(10)[0].item() == 1.0


def test_lens_rewards_sequence_difficulty_never_overflows():
    # sum of log-probs -1e6 nats: exp would underflow to 0 and 1/P overflow; in log space D is
    # the floor 2 max pbar and every value is finite.
    mean_logp = torch.tensor([-1.0, -2.0, -1.0, -3.0])
    lengths = torch.tensor([1_000_000, 10, 10, 10])
    rt = lens_rewards(torch.tensor([1, 0, 0, 0]), mean_logp, 4, "sequence", lengths)
    assert bool(torch.isfinite(rt).all())
    assert rt[2].item() == pytest.approx(-0.25, abs=1e-6)  # top confidence: u = 1/2
    with pytest.raises(ValueError, match="needs the completion lengths"):
        lens_rewards(torch.tensor([1, 0, 0, 0]), mean_logp, 4, "sequence")
    with pytest.raises(ValueError, match="difficulty='raw' is not one of pbar, sequence"):
        lens_rewards(torch.tensor([1, 0, 0, 0]), mean_logp, 4, "raw")


# --- the calibrated correctness inside a weighted reward sum (AMIR-GRPO + LENS) -------------


def test_lens_calibrated_total_hand_computed():
    # AMIR rewards: correctness 2.0 (weight 1) + other components; rows 0 and 2 correct.
    total = torch.tensor([3.1, 0.9, 2.7, 0.4])
    correctness = torch.tensor([2.0, 0.0, 2.0, 0.0])
    correct = torch.tensor([True, False, True, False])
    rt = torch.tensor([1.0, -0.1, 1.0, -0.02])
    out = lens_calibrated_total(total, correctness, correct, rt, correct_reward=2.0)
    # wrong rows: total - 0 + 2.0 * rt; correct rows keep their total
    torch.testing.assert_close(out, torch.tensor([3.1, 0.9 - 0.2, 2.7, 0.4 - 0.04]))
    # the binary reward alone: the total becomes rt itself
    binary = correct.float()
    torch.testing.assert_close(lens_calibrated_total(binary, binary, correct, rt, 1.0), rt)
