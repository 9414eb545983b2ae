"""Per-token entropy from logits (value and gradient), the high-entropy token mask, the entropy
bonus in loss_terms and the adaptive coefficient (docs/algorithms.md, "Entropy controls"), and
REINFORCE++-baseline's advantages (docs/algorithms.md, "REINFORCE++-baseline")."""

from __future__ import annotations

import math

import pytest
import torch

from groupwise.algorithms import (
    AdaptiveEntropy,
    AdvantageSettings,
    GroupRewards,
    LossSettings,
    get_advantage_estimator,
    high_entropy_mask,
    loss_terms,
    token_logprobs,
    token_logprobs_and_entropy,
)


def _flat(nested):
    return [x for row in nested for x in row]


def test_entropy_by_hand():
    # uniform over 2: ln 2; p = (1/4, 3/4): -(1/4 ln 1/4 + 3/4 ln 3/4)
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)]]])
    tokens = torch.tensor([[0, 1]])
    logp, entropy = token_logprobs_and_entropy(logits, tokens)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy.flatten().tolist() == pytest.approx([math.log(2), h])
    assert logp.flatten().tolist() == pytest.approx([math.log(0.5), math.log(0.75)])
    # at temperature 2 the second distribution is softmax(0, ln 3 / 2) = (1, sqrt 3) / (1 + sqrt 3)
    _, entropy = token_logprobs_and_entropy(logits, tokens, temperature=2.0)
    q = 1 / (1 + math.sqrt(3))
    assert entropy[0, 1].item() == pytest.approx(-(q * math.log(q) + (1 - q) * math.log(1 - q)))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_entropy_and_logp_gradients_match_autograd(temperature):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 7, generator=generator, requires_grad=True)
    tokens = torch.randint(0, 7, (2, 3), generator=generator)
    weights_h = torch.randn(2, 3, generator=generator)
    weights_l = torch.randn(2, 3, generator=generator)
    logp, entropy = token_logprobs_and_entropy(
        logits, tokens, chunk_size=2, temperature=temperature
    )
    ((entropy * weights_h).sum() + (logp * weights_l).sum()).backward()
    ours = logits.grad.clone()
    logits.grad = None
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    reference_h = -(log_p.exp() * log_p).sum(-1)
    reference_logp = log_p.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(entropy, reference_h, atol=1e-6)
    assert torch.allclose(logp, token_logprobs(logits, tokens, temperature=temperature))
    ((reference_h * weights_h).sum() + (reference_logp * weights_l).sum()).backward()
    assert torch.allclose(ours, logits.grad, atol=1e-6)
    # only one of the outputs used: the other's gradient counts as zero
    logits.grad = None
    _, entropy = token_logprobs_and_entropy(logits, tokens, temperature=temperature)
    entropy.sum().backward()
    only_h = logits.grad.clone()
    logits.grad = None
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    (-(log_p.exp() * log_p).sum()).backward()
    assert torch.allclose(only_h, logits.grad, atol=1e-6)


def test_high_entropy_mask_by_hand():
    entropy = torch.tensor([[1.0, 2.0, 3.0, 4.0], [9.0, 0.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 0, 0]], dtype=torch.bool)
    # masked values (1, 2, 3, 4, 0.5); 0.6-quantile (rho = 0.4) by linear interpolation: 2.6
    kept = high_entropy_mask(entropy, mask, 0.4)
    assert kept.tolist() == [[False, False, True, True], [False, False, False, False]]
    assert high_entropy_mask(entropy, mask, 1.0).equal(mask)
    assert high_entropy_mask(entropy, mask, 0.0).sum().item() == 1  # the highest only
    assert not high_entropy_mask(entropy, torch.zeros_like(mask), 0.5).any()


def test_loss_terms_entropy_bonus_and_top_tokens():
    logp = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    entropy = torch.tensor([[1.0, 3.0], [2.0, 4.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 2, dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    settings = LossSettings(aggregation="dapo", entropy_bonus=True, top_entropy_quantile=0.5)
    terms = loss_terms(logp, mask, adv, settings, entropy=entropy)
    # median 2.5: tokens with H 3 and 4 kept; bonus = their mean entropy 3.5
    assert terms.entropy.item() == pytest.approx(3.5)
    assert terms.clip["entropy"].item() == pytest.approx(2.5)  # logged over every token
    # policy: on-policy per-token -A on the kept tokens, 0 elsewhere, / 4 tokens
    assert terms.policy.item() == pytest.approx((-1.0 + 1.0) / 4)
    (terms.grpo(0.0, entropy_coef=0.1)).backward()
    assert logp.grad.flatten().tolist() == pytest.approx(_flat([[0, -0.25], [0, 0.25]]))
    assert entropy.grad.flatten().tolist() == pytest.approx(_flat([[0, -0.05], [0, -0.05]]))
    with pytest.raises(ValueError, match="needs entropy"):
        loss_terms(logp, mask, adv, settings)


def test_adaptive_entropy_by_hand():
    control = AdaptiveEntropy(init=0.1, target=1.0, delta=0.05, min_value=0.0, max_value=0.12)
    assert control.applied == 0.0  # nothing measured yet
    control.observe(0.8)  # at or below the target: more bonus, and it applies
    assert control.value == pytest.approx(0.12) and control.applied == pytest.approx(0.12)
    control.observe(1.2)  # above: less, and none applied
    assert control.value == pytest.approx(0.07) and control.applied == 0.0
    restored = AdaptiveEntropy(init=0.1, target=1.0)
    restored.load_state_dict(control.state_dict())
    assert (restored.value, restored.last) == (control.value, control.last)
    with pytest.raises(ValueError):
        AdaptiveEntropy(init=2.0, target=1.0)


def test_reinforce_plus_plus_baseline_by_hand():
    estimator = get_advantage_estimator("reinforce_plus_plus_baseline")
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    batch = GroupRewards(rewards, rewards.bool(), 4, lengths=torch.ones(8))
    result = estimator.fn(batch, AdvantageSettings())
    # minus group means 0.25 and 0.75; batch mean 0, unbiased var 1.5 / 7
    centred = torch.tensor([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25])
    assert result.advantages.tolist() == pytest.approx((centred / math.sqrt(1.5 / 7)).tolist())
    assert result.rewards.equal(rewards)
    # lengths weight the batch statistics (tokens): group of 2, lengths 1 and 3
    batch = GroupRewards(
        torch.tensor([1.0, 0.0]), torch.tensor([True, False]), 2, lengths=torch.tensor([1.0, 3.0])
    )
    # centred (0.5, -0.5); token mean (0.5 - 1.5) / 4 = -0.25; token var (1 * 0.75^2 +
    # 3 * 0.25^2) / 4 * 4 / 3 = 0.25
    result = estimator.fn(batch, AdvantageSettings())
    assert result.advantages.tolist() == pytest.approx([0.75 / 0.5, -0.25 / 0.5], rel=1e-6)
    # a group of one has baseline 0
    one = GroupRewards(torch.tensor([2.0, 0.0]), torch.tensor([True, False]), 1, lengths=None)
    with pytest.raises(ValueError, match="needs lengths"):
        estimator.fn(one, AdvantageSettings())
    one = GroupRewards(one.rewards, one.correct, 1, lengths=torch.ones(2))
    assert estimator.fn(one, AdvantageSettings()).advantages.tolist() == pytest.approx(
        [1 / math.sqrt(2), -1 / math.sqrt(2)], rel=1e-6
    )
    assert estimator.needs_lengths and not estimator.per_group
