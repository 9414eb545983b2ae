"""AMIR-GRPO pairs, preference loss and adaptive lambda (docs/algorithms.md §2)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwise.algorithms import (
    AdaptiveLambda,
    mine_pairs,
    preference_coefficients,
    preference_loss,
    preference_surrogate,
)


def _log1p_exp_neg(z: float) -> float:
    """-log sigmoid(z) = log(1 + exp(-z))."""
    return math.log1p(math.exp(-z))


# --- mine_pairs ----------------------------------------------------------------------------


def test_mine_pairs_hand_computed():
    rewards = torch.tensor([3.0, 1.0, 2.0, 0.5, 0.0, 0.0, 0.0, 2.7])
    chosen, rejected = mine_pairs(rewards, 4, margin=0.9)
    # group 0 gaps r_i - r_j > 0.9: (0,1) 2.0, (0,2) 1.0, (0,3) 2.5, (2,1) 1.0, (2,3) 1.5;
    # (1,3) is only 0.5. group 1 (rows 4..7): (7,4), (7,5), (7,6) with gap 2.7 each.
    assert chosen.tolist() == [0, 0, 0, 2, 2, 7, 7, 7]
    assert rejected.tolist() == [1, 2, 3, 1, 3, 4, 5, 6]
    assert chosen.dtype == torch.long and rejected.dtype == torch.long


def test_mine_pairs_margin_is_strict():
    # gap exactly 2.0 with margin 2.0 is not a pair (official code: r_i - r_j > delta_r)
    chosen, rejected = mine_pairs(torch.tensor([2.0, 0.0]), 2, margin=2.0)
    assert chosen.numel() == 0 and rejected.numel() == 0
    chosen, _ = mine_pairs(torch.tensor([2.0, 0.0]), 2, margin=1.999)
    assert chosen.tolist() == [0]


def test_mine_pairs_topk_first_argmax_on_ties():
    # rewards (2, 2, 0, 1), margin 0.5: the top completion is row 0 (first of the tied 2s);
    # pairs (0,2) gap 2 and (0,3) gap 1; rows 1 and 3 are not preferred sides in topk mode
    chosen, rejected = mine_pairs(torch.tensor([2.0, 2.0, 0.0, 1.0]), 4, 0.5, mode="topk")
    assert list(zip(chosen.tolist(), rejected.tolist(), strict=True)) == [(0, 2), (0, 3)]
    chosen, rejected = mine_pairs(torch.tensor([2.0, 2.0, 0.0, 1.0]), 4, 0.5, mode="all")
    assert list(zip(chosen.tolist(), rejected.tolist(), strict=True)) == [
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
        (3, 2),
    ]


def test_mine_pairs_cap_keeps_largest_gaps():
    rewards = torch.tensor([3.0, 1.0, 2.0, 0.5])
    # gaps: (0,3) 2.5, (0,1) 2.0, (2,3) 1.5, (0,2) 1.0, (2,1) 1.0 -> K = 2 keeps (0,3), (0,1),
    # returned in (i, j) order
    chosen, rejected = mine_pairs(rewards, 4, 0.9, max_pairs_per_group=2)
    assert list(zip(chosen.tolist(), rejected.tolist(), strict=True)) == [(0, 1), (0, 3)]
    # K = 4: the 4th place is a tie between (0,2) and (2,1), both gap 1.0; the earlier in
    # (i, j) order, (0,2), wins
    chosen, rejected = mine_pairs(rewards, 4, 0.9, max_pairs_per_group=4)
    assert list(zip(chosen.tolist(), rejected.tolist(), strict=True)) == [
        (0, 1),
        (0, 2),
        (0, 3),
        (2, 3),
    ]


def _brute_force_pairs(rewards, group_size, margin, mode, cap):
    pairs = []
    for g in range(len(rewards) // group_size):
        r = rewards[g * group_size : (g + 1) * group_size]
        top = r.index(max(r))
        found = [
            (r[i] - r[j], i, j)
            for i in range(group_size)
            for j in range(group_size)
            if r[i] - r[j] > margin and (mode == "all" or i == top)
        ]
        if cap is not None:
            found = sorted(found, key=lambda item: (-item[0], item[1], item[2]))[:cap]
        pairs += sorted((g * group_size + i, g * group_size + j) for _, i, j in found)
    return pairs


@settings(max_examples=60, deadline=None)
@given(
    group_size=st.integers(1, 6),
    groups=st.integers(1, 4),
    data=st.data(),
    margin=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    mode=st.sampled_from(["all", "topk"]),
    cap=st.sampled_from([None, 1, 2, 5]),
)
def test_mine_pairs_matches_brute_force(group_size, groups, data, margin, mode, cap):
    # rewards on a 0.25 grid: exact in float, with many ties and gaps equal to the margin
    size = group_size * groups
    rewards = data.draw(st.lists(st.integers(0, 12), min_size=size, max_size=size))
    rewards = [r / 4 for r in rewards]
    chosen, rejected = mine_pairs(
        torch.tensor(rewards, dtype=torch.float64), group_size, margin, mode, cap
    )
    got = list(zip(chosen.tolist(), rejected.tolist(), strict=True))
    assert got == _brute_force_pairs(rewards, group_size, margin, mode, cap)


def test_mine_pairs_errors():
    with pytest.raises(ValueError, match="mode='best' is not one of all, topk"):
        mine_pairs(torch.zeros(4), 2, 1.0, mode="best")
    with pytest.raises(ValueError, match="margin must be >= 0"):
        mine_pairs(torch.zeros(4), 2, -1.0)
    with pytest.raises(ValueError, match="max_pairs_per_group must be None or an int >= 1"):
        mine_pairs(torch.zeros(4), 2, 1.0, max_pairs_per_group=0)
    with pytest.raises(ValueError, match="multiple of group_size=3"):
        mine_pairs(torch.zeros(4), 3, 1.0)


# --- preference_loss -----------------------------------------------------------------------


def test_preference_loss_hand_computed_with_reference():
    policy = torch.tensor([-1.0, -2.0, -1.5], dtype=torch.float64)
    ref = torch.tensor([-1.2, -1.8, -1.5], dtype=torch.float64)
    chosen, rejected = torch.tensor([0, 2]), torch.tensor([1, 1])
    # h = l_theta - l_ref = (0.2, -0.2, 0.0); beta = 0.5
    # z_01 = 0.5 (0.2 - (-0.2)) = 0.2;  z_21 = 0.5 (0.0 - (-0.2)) = 0.1
    expected = (_log1p_exp_neg(0.2) + _log1p_exp_neg(0.1)) / 2  # (0.598139 + 0.644397) / 2
    loss = preference_loss(policy, ref, chosen, rejected, beta=0.5)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert loss.item() == pytest.approx(0.621268, abs=1e-6)


def test_preference_loss_hand_computed_reference_free():
    policy = torch.tensor([-1.0, -2.0, -1.5], dtype=torch.float64)
    # l_ref = 0: z_01 = 0.5 (-1 + 2) = 0.5, z_21 = 0.5 (-1.5 + 2) = 0.25
    expected = (_log1p_exp_neg(0.5) + _log1p_exp_neg(0.25)) / 2
    loss = preference_loss(policy, None, torch.tensor([0, 2]), torch.tensor([1, 1]), 0.5)
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_preference_loss_gradcheck():
    torch.manual_seed(0)
    policy = torch.randn(6, dtype=torch.float64, requires_grad=True)
    ref = torch.randn(6, dtype=torch.float64)
    chosen, rejected = torch.tensor([0, 0, 3, 5]), torch.tensor([1, 2, 4, 4])
    assert torch.autograd.gradcheck(
        lambda p: preference_loss(p, ref, chosen, rejected, beta=0.7), (policy,)
    )
    assert torch.autograd.gradcheck(
        lambda p: preference_loss(p, None, chosen, rejected, beta=0.2), (policy,)
    )


def test_preference_loss_gradient_direction_and_reference_is_constant():
    policy = torch.tensor([-1.0, -1.0], requires_grad=True)
    ref = torch.tensor([-1.0, -1.0], requires_grad=True)
    loss = preference_loss(policy, ref, torch.tensor([0]), torch.tensor([1]), beta=2.0)
    loss.backward()
    # z = 0: d/dz -log sigmoid(z) = -sigmoid(-z) = -0.5; dz/dl_0 = beta = 2, dz/dl_1 = -2
    torch.testing.assert_close(policy.grad, torch.tensor([-1.0, 1.0]))
    assert ref.grad is None


def test_preference_loss_no_pairs_is_zero_and_differentiable():
    policy = torch.tensor([-1.0, -2.0], requires_grad=True)
    empty = torch.zeros(0, dtype=torch.long)
    loss = preference_loss(policy, None, empty, empty, beta=0.5)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(policy.grad, torch.zeros(2))


def test_preference_loss_stable_for_large_logits():
    # z = 1.0 * (-1000 - 0) -> -log sigmoid(-1000) = 1000 (a naive log(sigmoid) gives inf)
    policy = torch.tensor([-1000.0, 0.0])
    loss = preference_loss(policy, None, torch.tensor([0]), torch.tensor([1]), beta=1.0)
    assert loss.item() == pytest.approx(1000.0)


def test_preference_loss_errors():
    policy = torch.zeros(3)
    with pytest.raises(ValueError, match="beta must be > 0"):
        preference_loss(policy, None, torch.tensor([0]), torch.tensor([1]), beta=0.0)
    with pytest.raises(ValueError, match="1 pairs, rejected 2"):
        preference_loss(policy, None, torch.tensor([0]), torch.tensor([1, 2]), beta=1.0)
    with pytest.raises(ValueError, match="chosen must be a 1-D integer tensor"):
        preference_loss(policy, None, torch.tensor([0.0]), torch.tensor([1]), beta=1.0)
    with pytest.raises(ValueError, match="ref_mean_logp has shape"):
        preference_loss(policy, torch.zeros(2), torch.tensor([0]), torch.tensor([1]), beta=1.0)


# --- preference_coefficients: L_pref in per-completion form ----------------------------------


def test_preference_coefficients_hand_computed():
    # one group of 3, reference-free, beta 0.5; pairs (0, 1) and (0, 2), P = 2
    l_old = torch.tensor([-0.2, -1.0, -0.6], dtype=torch.float64)
    chosen, rejected = torch.tensor([0, 0]), torch.tensor([1, 2])
    terms = preference_coefficients(l_old, None, chosen, rejected, beta=0.5)
    z = [0.5 * 0.8, 0.5 * 0.4]
    s = [1 / (1 + math.exp(v)) for v in z]  # sigmoid(-z)
    # c_0 = -(beta/P)(s_01 + s_02), c_1 = +(beta/P) s_01, c_2 = +(beta/P) s_02
    expected = torch.tensor([-0.25 * (s[0] + s[1]), 0.25 * s[0], 0.25 * s[1]], dtype=torch.float64)
    torch.testing.assert_close(terms.coefficients, expected)
    torch.testing.assert_close(
        terms.pair_losses, torch.tensor([_log1p_exp_neg(v) for v in z], dtype=torch.float64)
    )
    torch.testing.assert_close(terms.logp_margins, torch.tensor([0.8, 0.4], dtype=torch.float64))
    # the coefficients of a group sum to 0 (every pair adds +w and -w)
    assert abs(terms.coefficients.sum().item()) < 1e-15
    # a batch's normaliser: these 2 pairs as a part of 8 pairs in all scale c by 2/8
    part = preference_coefficients(l_old, None, chosen, rejected, beta=0.5, num_pairs=8)
    torch.testing.assert_close(part.coefficients, expected / 4)


@settings(max_examples=60, deadline=None)
@given(
    group_size=st.integers(2, 6),
    groups=st.integers(1, 4),
    data=st.data(),
    margin=st.sampled_from([0.0, 0.5, 1.0]),
    mode=st.sampled_from(["all", "topk"]),
    cap=st.sampled_from([None, 1, 3]),
    with_reference=st.booleans(),
    beta=st.sampled_from([0.1, 0.5, 2.0]),
)
def test_coefficient_surrogate_has_the_gradient_of_preference_loss(
    group_size, groups, data, margin, mode, cap, with_reference, beta
):
    size = group_size * groups
    rewards = torch.tensor(data.draw(st.lists(st.integers(0, 8), min_size=size, max_size=size)))
    chosen, rejected = mine_pairs(rewards.double() / 4, group_size, margin, mode, cap)
    seed = data.draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    l_theta = (-3 * torch.rand(size, generator=generator, dtype=torch.float64)).requires_grad_()
    ref = -3 * torch.rand(size, generator=generator, dtype=torch.float64)
    ref = ref if with_reference else None

    (grad_definition,) = torch.autograd.grad(
        preference_loss(l_theta, ref, chosen, rejected, beta), l_theta
    )
    terms = preference_coefficients(l_theta.detach(), ref, chosen, rejected, beta)
    (grad_surrogate,) = torch.autograd.grad(
        preference_surrogate(l_theta, terms.coefficients), l_theta
    )
    torch.testing.assert_close(grad_surrogate, grad_definition, rtol=1e-12, atol=1e-15)
    # the value of L_pref from the same quantities
    expected = preference_loss(l_theta.detach(), ref, chosen, rejected, beta)
    got = terms.pair_losses.sum() / max(chosen.numel(), 1)
    torch.testing.assert_close(got, expected)
    # rows in no pair get 0
    paired = torch.zeros(size, dtype=torch.bool)
    paired[chosen] = paired[rejected] = True
    assert bool((terms.coefficients[~paired] == 0).all())
    # split into two parts of whole groups with the batch's P: the parts' gradients add up
    cut = (groups // 2) * group_size
    total = torch.zeros(size, dtype=torch.float64)
    for lo, hi in ((0, cut), (cut, size)):
        inside = (chosen >= lo) & (chosen < hi)
        part = preference_coefficients(
            l_theta.detach()[lo:hi],
            None if ref is None else ref[lo:hi],
            chosen[inside] - lo,
            rejected[inside] - lo,
            beta,
            num_pairs=chosen.numel(),
        )
        total[lo:hi] = part.coefficients
    torch.testing.assert_close(total, grad_definition, rtol=1e-12, atol=1e-15)


def test_preference_coefficients_errors():
    l_old = torch.zeros(4)
    pairs = torch.tensor([0]), torch.tensor([1])
    with pytest.raises(ValueError, match="num_pairs must be an int >= 1"):
        preference_coefficients(l_old, None, *pairs, beta=0.5, num_pairs=0)
    with pytest.raises(ValueError, match="beta must be > 0"):
        preference_coefficients(l_old, None, *pairs, beta=0.0)
    with pytest.raises(ValueError, match="must match"):
        preference_coefficients(l_old, torch.zeros(3), *pairs, beta=0.5)
    with pytest.raises(ValueError, match="one per completion"):
        preference_surrogate(l_old, torch.zeros(3))
    empty = preference_coefficients(l_old, None, torch.zeros(0).long(), torch.zeros(0).long(), 0.5)
    assert torch.equal(empty.coefficients, torch.zeros(4)) and empty.pair_losses.numel() == 0


# --- AdaptiveLambda ------------------------------------------------------------------------


def test_adaptive_lambda_hand_computed_sequence():
    lam = AdaptiveLambda()
    assert lam.value == 0.01
    # ratio = 0.01 * 25 / 1 = 0.25 < 0.30 -> 1.25 * 0.01 = 0.0125 (with the updated lambda the
    # ratio would be 0.3125, inside the band: the rule uses the lambda before the update)
    assert lam.update(pg_loss=1.0, pref_loss=25.0) == pytest.approx(0.0125)
    # ratio = 0.0125 * 4 / 0.1 = 0.5 inside [0.30, 0.70] -> unchanged
    assert lam.update(0.1, 4.0) == pytest.approx(0.0125)
    # ratio = 0.0125 * 1 / 0.01 = 1.25 > 0.70 -> 0.8 * 0.0125 = 0.01
    assert lam.update(0.01, 1.0) == pytest.approx(0.01)
    # L_GRPO = 0 or negative: denominator max(1e-9, L_GRPO) = 1e-9, ratio huge -> shrink
    assert lam.update(0.0, 1.0) == pytest.approx(0.008)
    assert lam.update(-0.5, 1.0) == pytest.approx(0.0064)
    assert lam.update(-0.5, 1.0) == pytest.approx(0.00512)
    # 0.8 * 0.00512 = 0.004096 < floor 0.005
    assert lam.update(-0.5, 1.0) == pytest.approx(0.005)
    assert lam.value == pytest.approx(0.005)
    # 0-dim tensors are accepted as losses: ratio = 0.005 * 1 / 1 < 0.3 -> 0.00625
    assert lam.update(torch.tensor(1.0), torch.tensor(1.0)) == pytest.approx(0.00625)


def test_adaptive_lambda_bounds_and_band_edges():
    lam = AdaptiveLambda()
    for _ in range(30):
        lam.update_from_ratio(0.0)
    assert lam.value == pytest.approx(0.05)  # ceiling
    for _ in range(30):
        lam.update_from_ratio(math.inf)
    assert lam.value == pytest.approx(0.005)  # floor
    lam = AdaptiveLambda()
    # the band edges themselves leave lambda alone (strict < low, > high)
    assert lam.update_from_ratio(0.30) == 0.01
    assert lam.update_from_ratio(0.70) == 0.01
    assert lam.update_from_ratio(0.29) == pytest.approx(0.0125)
    assert lam.update_from_ratio(0.71) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="NaN ratio"):
        lam.update_from_ratio(math.nan)


def test_adaptive_lambda_state_round_trip():
    lam = AdaptiveLambda()
    lam.update(1.0, 25.0)
    lam.update(1.0, 1.0)
    state = lam.state_dict()
    restored = AdaptiveLambda()
    restored.load_state_dict(state)
    assert restored.value == lam.value
    for pg, pref in [(0.5, 10.0), (0.01, 3.0), (1.0, 1.0)]:
        assert restored.update(pg, pref) == lam.update(pg, pref)
    with pytest.raises(KeyError, match="'value'"):
        restored.load_state_dict({})
    with pytest.raises(ValueError, match="outside"):
        restored.load_state_dict({"value": 0.5})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"low": 0.7, "high": 0.3}, "low < high"),
        ({"init": 0.1}, "min_value <= init <= max_value"),
        ({"init": 0.001}, "min_value <= init <= max_value"),
        ({"up": 1.0}, "up > 1"),
        ({"down": 1.2}, "0 < down < 1"),
        ({"down": 0.0}, "down must be > 0"),
        ({"min_value": -1.0}, "min_value must be > 0"),
    ],
)
def test_adaptive_lambda_validates_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AdaptiveLambda(**kwargs)


def test_adaptive_lambda_measures():
    loss = AdaptiveLambda(measure="loss")
    # official rule on losses: ratio 0.01 * 25 / 1 = 0.25 < 0.3 -> grows; gradients ignored
    assert loss.observe_losses(1.0, 25.0) == pytest.approx(0.0125)
    assert loss.observe_gradient_norms(1.0, 1000.0) == pytest.approx(0.0125)
    assert not loss.measures_gradient(0)

    grad = AdaptiveLambda(measure="grad", every=3)
    assert [grad.measures_gradient(step) for step in range(4)] == [True, False, False, True]
    # ratio = 0.01 * 100 / 1 = 1.0 > 0.7 -> shrinks; losses ignored
    assert grad.observe_losses(1.0, 25.0) == 0.01
    assert grad.observe_gradient_norms(1.0, 100.0) == pytest.approx(0.008)
    # no preference gradient (no pairs): no update
    assert grad.observe_gradient_norms(1.0, 0.0) == pytest.approx(0.008)
    # ratio 0.008 * 10 / 1 = 0.08 < 0.3 -> grows
    assert grad.observe_gradient_norms(1.0, 10.0) == pytest.approx(0.01)

    fixed = AdaptiveLambda(measure="fixed")
    assert fixed.observe_losses(1.0, 25.0) == fixed.observe_gradient_norms(1.0, 100.0) == 0.01
    assert not fixed.measures_gradient(0)
    with pytest.raises(ValueError, match="measure='both' is not one of loss, grad, fixed"):
        AdaptiveLambda(measure="both")
    with pytest.raises(ValueError, match="every must be an int >= 1"):
        AdaptiveLambda(every=0)
