"""Clipped surrogate, aggregation and k3 KL (docs/algorithms.md §1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from groupwise.algorithms import aggregate_token_losses, kl_k3, policy_loss

# Three completions of lengths 3, 1 and 4 in a [3, 5] batch; advantages A = (1, -0.5, 2).
LENGTHS = [3, 1, 4]
ADV = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)


def _mask(lengths: list[int], width: int = 5) -> torch.Tensor:
    return torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def _random_logp(seed: int = 0, shape: tuple[int, int] = (3, 5)) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (-torch.rand(shape, generator=generator, dtype=torch.float64) * 3).requires_grad_()


# --- on-policy values and gradients per aggregation ---------------------------------------


def test_on_policy_grpo_value_and_gradient():
    logp, mask = _random_logp(), _mask(LENGTHS)
    loss, metrics = policy_loss(logp, None, ADV, mask)
    # rho = 1 everywhere: per-token loss -A_i, per-completion mean -A_i, batch mean
    # -(1 - 0.5 + 2) / 3 = -2.5 / 3
    assert loss.item() == pytest.approx(-2.5 / 3)
    loss.backward()
    # d loss / d logp_{i,t} = -A_i / (|o_i| * B) on completion tokens, 0 on padding:
    # row 0: -1/(3*3) = -1/9, row 1: 0.5/(1*3) = 1/6, row 2: -2/(4*3) = -1/6
    expected = torch.zeros(3, 5, dtype=torch.float64)
    expected[0, :3] = -1 / 9
    expected[1, :1] = 1 / 6
    expected[2, :4] = -1 / 6
    torch.testing.assert_close(logp.grad, expected)
    assert metrics["ratio_mean"].item() == pytest.approx(1.0)
    assert metrics["clip_fraction_low"].item() == 0.0
    assert metrics["clip_fraction_high"].item() == 0.0


def test_on_policy_dapo_value_and_gradient():
    logp, mask = _random_logp(), _mask(LENGTHS)
    loss, _ = policy_loss(logp, None, ADV, mask, aggregation="dapo")
    # token mean over the batch: -(3*1 + 1*(-0.5) + 4*2) / 8 = -10.5 / 8
    assert loss.item() == pytest.approx(-10.5 / 8)
    loss.backward()
    # d/dlogp_{i,t} = -A_i / 8
    expected = -(ADV.unsqueeze(1) / 8) * mask
    torch.testing.assert_close(logp.grad, expected)


@pytest.mark.parametrize(("max_len", "denominator"), [(None, 3 * 5), (16, 3 * 16)])
def test_on_policy_dr_grpo_value_and_gradient(max_len, denominator):
    logp, mask = _random_logp(), _mask(LENGTHS)
    loss, _ = policy_loss(
        logp, None, ADV, mask, aggregation="dr_grpo", max_completion_length=max_len
    )
    # token sum / (B * L): -10.5 / (3 * 5) with L = T = 5 by default, -10.5 / 48 with L = 16
    assert loss.item() == pytest.approx(-10.5 / denominator)
    loss.backward()
    torch.testing.assert_close(logp.grad, -(ADV.unsqueeze(1) / denominator) * mask)


def test_empty_completion_counts_as_zero_in_grpo_mean():
    logp = _random_logp(shape=(2, 3))
    loss, _ = policy_loss(logp, None, torch.tensor([1.0, 5.0]), _mask([2, 0], 3))
    # completion 0: -1; completion 1 has no tokens: 0; mean over B = 2 -> -0.5
    assert loss.item() == pytest.approx(-0.5)


# --- clipping -----------------------------------------------------------------------------


def test_token_clipping_table():
    # one token per completion; old = 0, logp = log(rho)
    ratios = torch.tensor([1.5, 1.5, 0.5, 0.5, 1.1, 0.9], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    logp = ratios.log().unsqueeze(1).requires_grad_()
    old = torch.zeros_like(logp)
    mask = torch.ones_like(logp, dtype=torch.bool)
    loss, metrics = policy_loss(logp, old, adv, mask)
    # per token -min(rho A, clip(rho, 0.8, 1.2) A):
    # rho 1.5, A +1: -min(1.5, 1.2) = -1.2, clipped (no gradient)
    # rho 1.5, A -1: -min(-1.5, -1.2) = 1.5, active: d/dlogp (-rho A) = rho = 1.5
    # rho 0.5, A +1: -min(0.5, 0.8) = -0.5, active: -rho A = -0.5
    # rho 0.5, A -1: -min(-0.5, -0.8) = 0.8, clipped
    # rho 1.1, A +1: -1.1, active: -1.1;  rho 0.9, A -1: 0.9, active: 0.9
    per_token = [-1.2, 1.5, -0.5, 0.8, -1.1, 0.9]
    assert loss.item() == pytest.approx(sum(per_token) / 6)
    loss.backward()
    grads = torch.tensor([0.0, 1.5, -0.5, 0.0, -1.1, 0.9], dtype=torch.float64) / 6
    torch.testing.assert_close(logp.grad.squeeze(1), grads)
    # TRL's definitions: low = rho < 0.8 and A < 0 (row 3), high = rho > 1.2 and A > 0 (row 0)
    assert metrics["clip_fraction_low"].item() == pytest.approx(1 / 6)
    assert metrics["clip_fraction_high"].item() == pytest.approx(1 / 6)
    assert metrics["clip_fraction"].item() == pytest.approx(2 / 6)
    assert metrics["ratio_mean"].item() == pytest.approx(6.0 / 6)
    assert all(not value.requires_grad for value in metrics.values())


def test_asymmetric_clip_higher():
    # eps_high = 0.28 (DAPO clip-higher): rho = 1.25 with A > 0 stays active
    logp = torch.tensor([[math.log(1.25)]], requires_grad=True)
    mask = torch.ones(1, 1, dtype=torch.bool)
    loss, metrics = policy_loss(logp, torch.zeros(1, 1), torch.tensor([1.0]), mask, 0.2, 0.28)
    assert loss.item() == pytest.approx(-1.25)
    loss.backward()
    assert logp.grad.item() == pytest.approx(-1.25)
    assert metrics["clip_fraction_high"].item() == 0.0


def _reference_token_loss(logp, old, adv, mask, eps_low, eps_high):
    """Loop-by-loop GRPO aggregation of the clipped surrogate, for comparison."""
    rows = []
    for b in range(logp.shape[0]):
        terms = []
        for t in range(logp.shape[1]):
            if mask[b, t]:
                rho = torch.exp(logp[b, t] - old[b, t])
                clipped = torch.clamp(rho, 1 - eps_low, 1 + eps_high)
                terms.append(-torch.minimum(rho * adv[b], clipped * adv[b]))
        rows.append(torch.stack(terms).mean() if terms else logp.sum() * 0)
    return torch.stack(rows).mean()


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), level=st.sampled_from(["token", "sequence"]))
@example(seed=1594, level="token")  # every completion empty: loss 0, gradient 0
def test_matches_loop_reference(seed, level):
    generator = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(4, 6, generator=generator, dtype=torch.float64) * 2).requires_grad_()
    old = logp.detach() + 0.4 * torch.randn(4, 6, generator=generator, dtype=torch.float64)
    adv = torch.randn(4, generator=generator, dtype=torch.float64)
    mask = _mask(torch.randint(0, 7, (4,), generator=generator).tolist(), 6)
    loss, _ = policy_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.3, ratio_level=level)
    if level == "token":
        expected = _reference_token_loss(logp, old, adv, mask, 0.2, 0.3)
    else:
        # GSPO: every token of completion i uses rho_i = exp(mean of its log-ratios)
        seq = torch.stack(
            [
                (logp[b][mask[b]] - old[b][mask[b]]).mean() if mask[b].any() else logp.sum() * 0
                for b in range(4)
            ]
        )
        expected = _reference_token_loss(
            seq.unsqueeze(1).expand(4, 6), torch.zeros(4, 6), adv, mask, 0.2, 0.3
        )
    (grad,) = torch.autograd.grad(loss, logp)
    (expected_grad,) = torch.autograd.grad(expected, logp)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, expected_grad)


# --- sequence level (GSPO) ----------------------------------------------------------------


def test_sequence_ratio_value_and_gradient():
    # completion 0: tokens with log-ratios (0.1, -0.2, 0.4) -> mean 0.1, rho_0 = e^0.1
    # completion 1: one token, log-ratio -0.05 -> rho_1 = e^-0.05
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, 0.0, 0.0]], dtype=torch.float64)
    delta = torch.tensor([[0.1, -0.2, 0.4], [-0.05, 0.0, 0.0]], dtype=torch.float64)
    logp = (old + delta).requires_grad_()
    mask = _mask([3, 1], 3)
    adv = torch.tensor([0.5, -2.0], dtype=torch.float64)
    loss, metrics = policy_loss(logp, old, adv, mask, ratio_level="sequence")
    rho = [math.exp(0.1), math.exp(-0.05)]  # both inside [0.8, 1.2]: unclipped
    # grpo aggregation: mean_i (-rho_i A_i), every token of i carries the same loss
    assert loss.item() == pytest.approx((-rho[0] * 0.5 + rho[1] * 2.0) / 2)
    loss.backward()
    # d/dlogp_{i,t} = -A_i rho_i / (|o_i| B): the gradient flows through the mean
    expected = torch.zeros(2, 3, dtype=torch.float64)
    expected[0, :3] = -0.5 * rho[0] / (3 * 2)
    expected[1, 0] = 2.0 * rho[1] / (1 * 2)
    torch.testing.assert_close(logp.grad, expected)
    # token-weighted mean of rho: (3 e^0.1 + e^-0.05) / 4
    assert metrics["ratio_mean"].item() == pytest.approx((3 * rho[0] + rho[1]) / 4)


def test_sequence_ratio_clipped_as_a_whole():
    # log-ratios (0.5, 0.5, -0.1): mean 0.3, rho = e^0.3 = 1.35 > 1.2 with A > 0 -> clipped:
    # every token of the completion loses its gradient, though one token alone has rho < 1
    old = torch.zeros(1, 3, dtype=torch.float64)
    logp = torch.tensor([[0.5, 0.5, -0.1]], dtype=torch.float64, requires_grad=True)
    mask = torch.ones(1, 3, dtype=torch.bool)
    loss, metrics = policy_loss(logp, old, torch.tensor([1.0]), mask, ratio_level="sequence")
    assert loss.item() == pytest.approx(-1.2)
    loss.backward()
    assert torch.equal(logp.grad, torch.zeros(1, 3, dtype=torch.float64))
    assert metrics["clip_fraction_high"].item() == 1.0


# --- robustness and errors ----------------------------------------------------------------


def test_padding_values_never_leak():
    logp = torch.tensor([[-1.0, -math.inf], [-0.5, math.nan]], requires_grad=True)
    old = torch.tensor([[-1.0, 50.0], [-0.5, 0.0]])
    mask = _mask([1, 1], 2)
    for level in ("token", "sequence"):
        loss, metrics = policy_loss(logp, old, torch.tensor([1.0, -1.0]), mask, ratio_level=level)
        (grad,) = torch.autograd.grad(loss, logp)
        assert math.isfinite(loss.item())
        assert bool(torch.isfinite(grad).all())
        assert metrics["ratio_mean"].item() == pytest.approx(1.0)


def test_policy_loss_errors():
    logp, mask, adv = torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2)
    with pytest.raises(ValueError, match="ratio_level='seq' is not one of token, sequence"):
        policy_loss(logp, None, adv, mask, ratio_level="seq")
    with pytest.raises(ValueError, match="aggregation='bnpo' is not one of grpo, dapo, dr_grpo"):
        policy_loss(logp, None, adv, mask, aggregation="bnpo")
    with pytest.raises(ValueError, match="eps_low must be < 1"):
        policy_loss(logp, None, adv, mask, eps_low=1.0)
    with pytest.raises(ValueError, match="old_logp must be None or a tensor"):
        policy_loss(logp, torch.zeros(2, 4), adv, mask)
    with pytest.raises(ValueError, match=r"advantages must be a tensor of shape \(2,\)"):
        policy_loss(logp, None, torch.zeros(3), mask)
    with pytest.raises(ValueError, match="mask must be a tensor of shape"):
        policy_loss(logp, None, adv, torch.ones(2, 2))
    with pytest.raises(ValueError, match="max_completion_length must be None or an int"):
        policy_loss(logp, None, adv, mask, aggregation="dr_grpo", max_completion_length=0)


def test_aggregate_token_losses_hand_computed():
    per_token = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]])
    mask = _mask([2, 1], 3)
    # grpo: mean((1 + 2) / 2, 4 / 1) = (1.5 + 4) / 2 = 2.75
    assert aggregate_token_losses(per_token, mask).item() == pytest.approx(2.75)
    # dapo: (1 + 2 + 4) / 3 tokens = 7/3
    assert aggregate_token_losses(per_token, mask, "dapo").item() == pytest.approx(7 / 3)
    # dr_grpo: 7 / (2 * 3) with L = T = 3; 7 / (2 * 10) with L = 10
    assert aggregate_token_losses(per_token, mask, "dr_grpo").item() == pytest.approx(7 / 6)
    assert aggregate_token_losses(per_token, mask, "dr_grpo", 10).item() == pytest.approx(0.35)


# --- kl_k3 --------------------------------------------------------------------------------


def test_kl_k3_hand_computed():
    # logp = log 0.5, ref = log 0.25: d = ref - logp = -log 2; e^d - d - 1 = 0.5 + log 2 - 1
    kl = kl_k3(torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]]))
    assert kl.item() == pytest.approx(0.5 + math.log(2) - 1)  # 0.193147


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(-20, 0, allow_nan=False), min_size=1, max_size=8),
    st.lists(st.floats(-20, 0, allow_nan=False), min_size=1, max_size=8),
)
def test_kl_k3_nonnegative_and_zero_when_equal(logp, ref):
    size = min(len(logp), len(ref))
    logp_t = torch.tensor(logp[:size], dtype=torch.float64)
    ref_t = torch.tensor(ref[:size], dtype=torch.float64)
    assert bool((kl_k3(logp_t, ref_t) >= 0).all())
    assert torch.equal(kl_k3(logp_t, logp_t), torch.zeros(size, dtype=torch.float64))


def test_kl_k3_is_unbiased_and_reference_is_constant():
    # E_{x ~ pi}[k3(x)] = sum_x pi (ref/pi - log(ref/pi) - 1) = 1 + KL(pi || ref) - 1
    pi = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    ref = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64, requires_grad=True)
    logp = pi.log().requires_grad_()
    per_token = kl_k3(logp, ref.log())
    expectation = (pi * per_token).sum()
    exact_kl = (pi * (pi / ref.detach()).log()).sum()
    assert expectation.item() == pytest.approx(exact_kl.item())
    per_token.sum().backward()
    # d/dlogp [e^d - d - 1] with d = ref - logp: -e^d + 1 = 1 - ref/pi
    torch.testing.assert_close(logp.grad, 1 - ref.detach() / pi)
    assert ref.grad is None
    with pytest.raises(ValueError, match="must match"):
        kl_k3(torch.zeros(2), torch.zeros(3))
