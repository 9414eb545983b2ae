"""The loss terms of one micro-batch and its share of the batch (groupwise.algorithms.objective).

docs/algorithms.md §1 (surrogate, KL, aggregation) and §2 (the AMIR term in per-completion form)."""

from __future__ import annotations

import pytest
import torch

from groupwise.algorithms import (
    LossSettings,
    aggregate_token_losses,
    kl_k3,
    loss_terms,
    micro_batch_share,
    policy_loss,
)


def _batch():
    generator = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 5, generator=generator, dtype=torch.float64)).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    return logp, mask.bool(), torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)


def test_loss_terms_are_the_reference_terms():
    logp, mask, advantages = _batch()
    ref = logp.detach() - 0.1
    settings = LossSettings(aggregation="dapo", kl_coef=0.05)
    terms = loss_terms(logp, mask, advantages, settings, ref_logp=ref)
    policy, clip = policy_loss(logp, None, advantages, mask, aggregation="dapo")
    torch.testing.assert_close(terms.policy, policy)
    torch.testing.assert_close(terms.kl, aggregate_token_losses(kl_k3(logp, ref), mask, "dapo"))
    torch.testing.assert_close(terms.grpo(0.05), policy + 0.05 * terms.kl)
    assert terms.preference is None and set(terms.clip) == set(clip)
    # no KL: the term is absent, not 0, and L_GRPO is the surrogate alone
    plain = loss_terms(logp, mask, advantages, LossSettings())
    assert plain.kl is None and plain.grpo(0.0) is plain.policy
    with pytest.raises(ValueError, match="kl_coef > 0 needs ref_logp"):
        loss_terms(logp, mask, advantages, settings)


def test_preference_term_gradient_is_coefficient_over_length_per_token():
    # d/d logp_{k,t} sum_k c_k l_k = c_k / |o_k| on completion tokens, 0 on padding
    logp, mask, advantages = _batch()
    coefficients = torch.tensor([0.2, -0.1, 0.0, 0.4], dtype=torch.float64)
    terms = loss_terms(logp, mask, advantages, LossSettings(), coefficients=coefficients)
    (grad,) = torch.autograd.grad(terms.preference, logp)
    lengths = mask.sum(dim=1, keepdim=True).double()
    expected = torch.where(mask, coefficients[:, None] / lengths, torch.zeros_like(grad))
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize("aggregation", ["grpo", "dapo", "dr_grpo"])
def test_micro_batch_shares_recover_the_batch_loss(aggregation):
    # the loss of a batch = sum over micro-batches of share x the micro-batch's loss
    logp, mask, advantages = _batch()
    settings = LossSettings(aggregation=aggregation, max_completion_length=5)
    whole = loss_terms(logp, mask, advantages, settings).policy
    pieces = []
    for rows in (slice(0, 1), slice(1, 3), slice(3, 4)):
        share = micro_batch_share(
            aggregation, rows.stop - rows.start, int(mask[rows].sum()), 4, int(mask.sum())
        )
        pieces.append(share * loss_terms(logp[rows], mask[rows], advantages[rows], settings).policy)
    torch.testing.assert_close(sum(pieces), whole)
    assert micro_batch_share("grpo", 2, 7, 8, 30) == 0.25
    assert micro_batch_share("dapo", 2, 6, 8, 30) == 0.2
    with pytest.raises(ValueError, match="aggregation='mean' is not one of"):
        micro_batch_share("mean", 1, 1, 1, 1)
