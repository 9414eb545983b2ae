"""groupwise's own trainer runs CISPO, GMPO, SAPO, REINFORCE++-baseline and the entropy controls:
its gradient on the fixed batch of tests/test_trainer_gradients.py equals the gradient of the
formulas of docs/algorithms.md ("Policy losses: CISPO, GMPO, SAPO", "REINFORCE++-baseline",
"Entropy controls"), written out here loop by loop without groupwise.algorithms."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from test_trainer_gradients import (
    ALL,
    COMPLETION_IDS,
    COMPLETION_MASK,
    PROMPT_IDS,
    PROMPT_MASK,
    REWARDS,
    Case,
    G,
    fixed_batch_trainer,
    flat_grad,
    grpo_advantages,
)

from groupwise.config import ConfigError

LENGTHS = [int(n) for n in COMPLETION_MASK.sum(dim=1)]


def rows_logp_entropy(model: torch.nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each completion's token log-probs and entropies, from its own unpadded pass."""
    logps, entropies = [], []
    for row in range(4):
        prompt = PROMPT_IDS[row // G][PROMPT_MASK[row // G].bool()]
        completion = COMPLETION_IDS[row][COMPLETION_MASK[row].bool()]
        logits = model(input_ids=torch.cat([prompt, completion])[None]).logits
        log_p = torch.log_softmax(logits[0, len(prompt) - 1 : -1].float(), -1)
        logps.append(log_p.gather(1, completion[:, None]).squeeze(1))
        entropies.append(-(log_p.exp() * log_p).sum(-1))
    return logps, entropies


def reinforce_pp_baseline(rewards: list[float]) -> list[float]:
    """Group mean removed, then whitened over the tokens (unbiased, + 1e-8 on the variance)."""
    centred = [r - sum(rewards[g : g + G]) / G for g in range(0, 4, G) for r in rewards[g : g + G]]
    n = sum(LENGTHS)
    mean = sum(c * n_i for c, n_i in zip(centred, LENGTHS, strict=True)) / n
    var = sum(n_i * (c - mean) ** 2 for c, n_i in zip(centred, LENGTHS, strict=True)) / (n - 1)
    return [(c - mean) / math.sqrt(var + 1e-8) for c in centred]


def cispo_entropy_loss(logps, entropies, olds, update):
    a = grpo_advantages(REWARDS)
    rows = []
    for i in ALL:
        weight = torch.exp(logps[i] - olds[i]).detach().clamp(max=1.0 + 1e-3)
        rows.append((-weight * a[i] * logps[i]).mean() - 0.05 * entropies[i].mean())
    return torch.stack(rows).mean()


def gmpo_loss(logps, entropies, olds, update):
    a = reinforce_pp_baseline(REWARDS)
    rows = []
    for i in ALL:
        log_ratio, sign = logps[i] - olds[i], math.copysign(1.0, a[i])
        clipped = log_ratio.clamp(-0.01, 0.01)
        kept = sign * torch.minimum(sign * log_ratio, sign * clipped)
        rows.append(-a[i] * torch.exp(kept.mean()))
    return torch.stack(rows).mean()


def sapo_top_entropy_loss(logps, entropies, olds, update):
    # tokens at or above the median of the 10 token entropies keep their loss (dapo: / 10)
    a = grpo_advantages(REWARDS)
    threshold = torch.quantile(torch.cat(entropies).detach(), 0.5)
    total = 0.0
    for i in ALL:
        rho, tau = torch.exp(logps[i] - olds[i]), 1.0 if a[i] > 0 else 1.05
        gate = torch.sigmoid(tau * (rho - 1)) * 4 / tau
        total = total + (-gate * a[i] * (entropies[i].detach() >= threshold)).sum()
    return total / sum(LENGTHS)


CASES = {
    "cispo_entropy_bonus": (
        [
            "algorithm.policy_loss=cispo",
            "algorithm.cispo_eps_high=0.001",
            "algorithm.entropy_coef=0.05",
            "algorithm.num_iterations=2",
        ],
        cispo_entropy_loss,
    ),
    "gmpo_reinforce_pp_baseline": (
        [
            "algorithm.policy_loss=gmpo",
            "algorithm.advantage=reinforce_plus_plus_baseline",
            "algorithm.gmpo_eps_low=0.01",
            "algorithm.gmpo_eps_high=0.01",
            "algorithm.num_iterations=2",
        ],
        gmpo_loss,
    ),
    "sapo_top_entropy": (
        [
            "algorithm.policy_loss=sapo",
            "algorithm.top_entropy_quantile=0.5",
            "algorithm.aggregation=dapo",
            "algorithm.num_iterations=2",
        ],
        sapo_top_entropy_loss,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_trainer_gradient_equals_the_direct_formula(tmp_path: Path, name: str) -> None:
    overrides, direct = CASES[name]
    trainer, batch, _, _ = fixed_batch_trainer(tmp_path, Case(overrides, None, updates=2))
    model, recorder = trainer.model, trainer.updater.optimizer
    with torch.no_grad():
        # sharper logits than tiny-random's near-uniform ones: token entropies spread apart,
        # so that the high-entropy tokens are the same to float rounding
        model.get_output_embeddings().weight.mul_(6.0)
        olds = [lp.detach() for lp in rows_logp_entropy(model)[0]]
    metrics = trainer.learn(batch).updates
    assert len(recorder.grads) == 2
    for update in range(2):
        with torch.no_grad():
            for p, w in zip(trainer.params, recorder.weights[update], strict=True):
                p.copy_(w)
        logps, entropies = rows_logp_entropy(model)
        expected = flat_grad(direct(logps, entropies, olds, update), trainer.params)
        assert any(float(g.abs().max()) > 1e-5 for g in expected), "a vacuous comparison"
        for got, want in zip(recorder.grads[update], expected, strict=True):
            torch.testing.assert_close(got, want, atol=5e-6, rtol=1e-4)
        if name != "gmpo_reinforce_pp_baseline":  # no entropy option: none computed
            token_mean = float(torch.cat(entropies).mean())
            assert metrics[update]["entropy"] == pytest.approx(token_mean, rel=1e-5)
    assert ("entropy" in metrics[0]) is (name != "gmpo_reinforce_pp_baseline")
    if name == "cispo_entropy_bonus":
        assert metrics[0]["entropy_coef"] == 0.05
        assert metrics[1]["clip_fraction"] > 0  # the IS weight was clipped on the moved policy


def test_adaptive_entropy_moves_per_update_and_refusals(tmp_path: Path) -> None:
    overrides = [
        "algorithm.entropy_adaptive=true",
        "algorithm.entropy_coef=0.01",
        "algorithm.entropy_target=100",  # far above: the coefficient grows and applies
        "algorithm.entropy_coef_delta=0.02",
        "algorithm.num_iterations=2",
    ]
    trainer, batch, _, _ = fixed_batch_trainer(tmp_path, Case(overrides, None, updates=2))
    metrics = trainer.learn(batch).updates
    # before any measurement nothing applies; after the first update 0.01 + 0.02
    assert [m["entropy_coef"] for m in metrics] == pytest.approx([0.0, 0.03])
    with pytest.raises(ConfigError, match="algorithm.policy_loss=gmpo takes token-level"):
        fixed_batch_trainer(
            tmp_path, Case(["algorithm.policy_loss=gmpo", "algorithm.loss_level=sequence"], None)
        )
