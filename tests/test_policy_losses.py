"""CISPO, GMPO and SAPO against hand-computed values and gradients, and combined with AMIR's
term and LENS's advantages through loss_terms (docs/algorithms.md, "Policy losses: CISPO,
GMPO, SAPO")."""

from __future__ import annotations

import math

import pytest
import torch

from groupwise.algorithms import (
    AlgorithmOptions,
    LossSettings,
    RewardFacts,
    SurrogateParams,
    get_policy_loss,
    loss_terms,
    policy_loss,
)

LN = math.log


def _two_tokens(logp_values, old_values):
    logp = torch.tensor([logp_values], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([old_values], dtype=torch.float64)
    return logp, old, torch.ones(1, 2, dtype=torch.bool)


def _flat(nested):
    return [x for row in nested for x in row]


def test_cispo_value_gradient_and_clip_by_hand():
    # ratios 2 and 0.5; upper bound 1 + 0.5 = 1.5, no lower bound: weights 1.5 and 0.5
    logp, old, mask = _two_tokens([LN(0.5), LN(0.25)], [LN(0.25), LN(0.5)])
    params = SurrogateParams(cispo_eps_high=0.5)
    loss, metrics = policy_loss(
        logp, old, torch.tensor([2.0]), mask, surrogate="cispo", params=params
    )
    # per token -w A logp: -1.5*2*ln 0.5 = 3 ln 2, -0.5*2*ln 0.25 = 2 ln 2; mean 2.5 ln 2
    assert loss.item() == pytest.approx(2.5 * LN(2))
    loss.backward()
    # gradient -w A / |o|: the clipped token keeps its gradient (1.5 is a constant weight)
    assert logp.grad.flatten().tolist() == pytest.approx(_flat([[-1.5, -0.5]]))
    assert metrics["clip_fraction_high"].item() == pytest.approx(0.5)
    assert metrics["clip_fraction_low"].item() == 0.0
    # a lower bound 1 - 0.4 = 0.6 lifts the second weight to 0.6
    logp.grad = None
    params = SurrogateParams(cispo_eps_low=0.4, cispo_eps_high=0.5)
    loss, metrics = policy_loss(
        logp, old, torch.tensor([2.0]), mask, surrogate="cispo", params=params
    )
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx(_flat([[-1.5, -0.6]]))
    assert metrics["clip_fraction_low"].item() == pytest.approx(0.5)


def test_gmpo_value_and_gradient_by_hand():
    # row 0: A = +1, log ratios (0.5, -0.1): 0.5 clipped to 0.4 -> mean 0.15, loss -e^0.15
    # row 1: A = -1, log ratios (0.5, -0.6): sgn A = -1 keeps max(l, clip l) = (0.5, -0.4)
    #        -> mean 0.05, loss +e^0.05
    logp = torch.tensor([[0.5, -0.1], [0.5, -0.6]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(2, 2, dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    loss, metrics = policy_loss(logp, old, torch.tensor([1.0, -1.0]), mask, surrogate="gmpo")
    assert loss.item() == pytest.approx((-math.exp(0.15) + math.exp(0.05)) / 2)
    loss.backward()
    # d/dl_t of -A exp(mean) = -A exp(mean) / |o| on unclipped tokens, 0 on clipped; / B = 2
    expected = [[0.0, -math.exp(0.15) / 4], [math.exp(0.05) / 4, 0.0]]
    assert logp.grad.flatten().tolist() == pytest.approx(_flat(expected))
    assert metrics["clip_fraction_high"].item() == pytest.approx(0.25)
    assert metrics["clip_fraction_low"].item() == pytest.approx(0.25)


def test_sapo_value_and_gradient_by_hand():
    # row 0: A = 2 > 0, tau 1, ratio 1.5; row 1: A = -1, tau 1.05, ratio 0.5
    logp = torch.tensor([[LN(1.5)], [LN(0.5)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(2, 1, dtype=torch.float64)
    mask = torch.ones(2, 1, dtype=torch.bool)
    loss, metrics = policy_loss(logp, old, torch.tensor([2.0, -1.0]), mask, surrogate="sapo")

    def sigmoid(x: float) -> float:
        return 1 / (1 + math.exp(-x))

    s0, s1 = sigmoid(0.5), sigmoid(1.05 * -0.5)
    gate0, gate1 = 4 * s0 / 1.0, 4 * s1 / 1.05
    assert loss.item() == pytest.approx((-2 * gate0 + 1 * gate1) / 2)
    loss.backward()
    # d gate / d log rho = 4 sigma (1 - sigma) rho; times -A, / B
    expected = [[-2 * 4 * s0 * (1 - s0) * 1.5 / 2], [4 * s1 * (1 - s1) * 0.5 / 2]]
    assert logp.grad.flatten().tolist() == pytest.approx(_flat(expected))
    assert metrics["clip_fraction"].item() == 0.0


@pytest.mark.parametrize("name", ["clip", "cispo", "gmpo", "sapo"])
def test_each_loss_on_policy_has_the_policy_gradient(name):
    # at rho = 1 every loss's gradient is -A / (|o| B) per token, the REINFORCE gradient
    generator = torch.Generator().manual_seed(1)
    logp = (-torch.rand(2, 3, generator=generator, dtype=torch.float64)).requires_grad_()
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    adv = torch.tensor([0.7, -1.3], dtype=torch.float64)
    loss, _ = policy_loss(logp, None, adv, mask, surrogate=name)
    loss.backward()
    expected = torch.tensor([[-0.7 / 4, -0.7 / 4, 0], [1.3 / 6, 1.3 / 6, 1.3 / 6]])
    assert torch.allclose(logp.grad, expected.double())


# CISPO's gradient is by design not its value's (the weight is a stop-gradient): finite
# differences of the value would see the weight move; its gradient is checked by hand above.
@pytest.mark.parametrize("name", ["gmpo", "sapo"])
def test_gradcheck_off_policy(name):
    generator = torch.Generator().manual_seed(2)
    logp = (-torch.rand(2, 3, generator=generator, dtype=torch.float64)).requires_grad_()
    old = -torch.rand(2, 3, generator=generator, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    adv = torch.tensor([0.7, -1.3], dtype=torch.float64)
    # small eps so that clipping is active on some tokens (away from the kinks)
    params = SurrogateParams(cispo_eps_low=0.1, cispo_eps_high=0.1, gmpo_eps_low=0.2)

    def fn(x):
        return policy_loss(x, old, adv, mask, surrogate=name, params=params)[0]

    assert torch.autograd.gradcheck(fn, (logp,))


def test_registry_refusals():
    with pytest.raises(ValueError, match="did you mean 'cispo'"):
        get_policy_loss("cisp")
    logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="token-level ratios"):
        policy_loss(
            logp, None, torch.ones(1), torch.ones(1, 2), ratio_level="sequence", surrogate="gmpo"
        )
    with pytest.raises(ValueError, match="policy_loss.*token-level"):
        AlgorithmOptions(policy_loss="cispo").build(
            RewardFacts([None], [1.0], 1.0), 4, ratio_level="sequence"
        )
    with pytest.raises(ValueError, match="top_entropy_quantile=0.2 cannot combine"):
        AlgorithmOptions(policy_loss="gmpo", top_entropy_quantile=0.2).check()


@pytest.mark.parametrize("name", ["cispo", "gmpo", "sapo"])
def test_amir_term_and_lens_advantages_combine(name):
    # the preference term is the same whatever the policy loss; the total gradient is the sum
    generator = torch.Generator().manual_seed(3)
    logp = (-torch.rand(4, 3, generator=generator, dtype=torch.float64)).requires_grad_()
    old = logp.detach() - 0.05
    mask = torch.ones(4, 3, dtype=torch.bool)
    # LENS-like advantages: a group with no correct answer has small negative-mean values
    adv = torch.tensor([0.9, -0.3, -0.3, -0.3], dtype=torch.float64)
    coefficients = torch.tensor([-0.5, 0.5, 0.0, 0.0], dtype=torch.float64)
    settings = LossSettings(policy_loss=name)
    terms = loss_terms(logp, mask, adv, settings, old_logp=old, coefficients=coefficients)
    alone, _ = policy_loss(logp, old, adv, mask, surrogate=name)
    assert terms.policy.item() == pytest.approx(alone.item())
    # sum_k c_k l_k with l_k the token mean of row k
    expected_pref = float((coefficients * logp.detach().mean(dim=1)).sum())
    assert terms.preference.item() == pytest.approx(expected_pref)
    (terms.policy + 0.1 * terms.preference).backward()
    grad_total = logp.grad.clone()
    logp.grad = None
    alone, _ = policy_loss(logp, old, adv, mask, surrogate=name)
    alone.backward()
    pref_grad = 0.1 * coefficients.unsqueeze(1).expand(4, 3) / 3
    assert torch.allclose(grad_total, logp.grad + pref_grad)


def test_algorithm_loss_settings_carry_the_options():
    options = AlgorithmOptions(policy_loss="sapo", sapo_tau_neg=2.0, entropy_coef=0.01)
    algorithm = options.build(RewardFacts([None], [1.0], 1.0), 4)
    settings = algorithm.loss_settings(LossSettings(eps_low=0.1, eps_high=0.3))
    assert settings.policy_loss == "sapo" and settings.surrogate.sapo_tau_neg == 2.0
    assert (settings.surrogate.eps_low, settings.surrogate.eps_high) == (0.1, 0.3)
    assert settings.entropy_bonus and algorithm.needs_entropy
    assert algorithm.entropy_coef() == 0.01
    assert not AlgorithmOptions().build(RewardFacts([None], [1.0], 1.0), 4).needs_entropy


def test_print_config_documents_the_losses_estimator_and_entropy_controls(capsys) -> None:
    from groupwise.cli import main

    assert main(["train", "--print-config"]) == 0
    text = capsys.readouterr().out
    for words in (
        "cispo (CISPO",
        "gmpo (GMPO",
        "sapo (SAPO",
        "reinforce_plus_plus_baseline",
        "entropy_coef: 0.0",
        "entropy_adaptive: false",
        "top_entropy_quantile: 1.0",
        'docs/algorithms.md, "Entropy controls"',
    ):
        assert words in text, words
