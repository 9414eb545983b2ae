"""groupwise.algorithms.importance: the truncated importance weights against the sampler's
log-probs and the log-prob difference, against the formula written out token by token; their
place in policy_loss (per token, before aggregation); and the learner's use of them."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from groupwise.algorithms import (
    policy_loss,
    sampling_logp_difference,
    truncated_importance_weights,
)

OLD = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.3, -4.0, -1.0, -1.0]])
SAMPLER = torch.tensor([[-1.5, -0.5, -0.5, 0.0], [-3.0, float("nan"), -1.1, 0.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)


def test_weights_are_the_truncated_ratio_token_by_token() -> None:
    cap = 3.0
    weights = truncated_importance_weights(OLD, SAMPLER, MASK, cap)
    for i in range(2):
        for t in range(4):
            if not MASK[i, t] or math.isnan(SAMPLER[i, t]):
                want = 1.0
            else:
                want = min(math.exp(OLD[i, t] - SAMPLER[i, t]), cap)
            assert weights[i, t].item() == pytest.approx(want, rel=1e-6), (i, t)
    # row 1, token 0: exp(2.7) = 14.9 is cut at the cap; row 0, token 1: exp(-1.5) is kept
    assert weights[1, 0].item() == cap and weights[0, 1].item() == pytest.approx(math.exp(-1.5))
    assert truncated_importance_weights(OLD, OLD, MASK, 1.0).eq(1.0).all()


def test_weights_carry_no_gradient_and_check_their_inputs() -> None:
    old = OLD.clone().requires_grad_(True)
    assert not truncated_importance_weights(old, SAMPLER, MASK, 2.0).requires_grad
    with pytest.raises(ValueError, match="cap must be >= 1"):
        truncated_importance_weights(OLD, SAMPLER, MASK, 0.5)
    with pytest.raises(ValueError, match="one shape"):
        truncated_importance_weights(OLD, SAMPLER[:, :3], MASK, 2.0)


def test_logp_difference_is_the_mean_and_max_over_completion_tokens() -> None:
    found = sampling_logp_difference(OLD, SAMPLER, MASK)
    # |d| on the masked tokens with a sampler log-prob: 0.5, 1.5, 0, 2.7, 0.1, 1.0
    values = [0.5, 1.5, 0.0, 2.7, 0.1, 1.0]
    assert found["mean"] == pytest.approx(sum(values) / len(values), rel=1e-6)
    assert found["max"] == pytest.approx(2.7, rel=1e-6)
    empty = sampling_logp_difference(OLD, SAMPLER, torch.zeros_like(MASK))
    assert empty == {"mean": 0.0, "max": 0.0}


@pytest.mark.parametrize("aggregation", ["grpo", "dapo", "dr_grpo"])
def test_policy_loss_weights_each_token_before_aggregation(aggregation: str) -> None:
    """The weighted loss and its gradient equal the written-out weighted surrogate; weights of
    1 give the unweighted loss exactly."""
    generator = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 4, generator=generator) * 2).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(2, 4, generator=generator)
    advantages = torch.tensor([1.0, -0.7])
    weights = truncated_importance_weights(old, SAMPLER.nan_to_num(-1.0), MASK, 3.0)
    loss, _ = policy_loss(
        logp, old, advantages, MASK, aggregation=aggregation, token_weights=weights
    )
    ratio = torch.exp(logp - old)
    clipped = ratio.clamp(0.8, 1.2)
    per_token = -torch.minimum(ratio * advantages[:, None], clipped * advantages[:, None])
    per_token = per_token * weights
    if aggregation == "grpo":
        want = torch.stack([per_token[i][MASK[i]].sum() / MASK[i].sum() for i in range(2)]).mean()
    elif aggregation == "dapo":
        want = per_token[MASK].sum() / MASK.sum()
    else:
        want = per_token[MASK].sum() / (2 * 4)
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    (grad,) = torch.autograd.grad(loss, logp)
    (want_grad,) = torch.autograd.grad(want, logp)
    assert torch.allclose(grad, want_grad, rtol=1e-6, atol=1e-8)
    ones, _ = policy_loss(
        logp, old, advantages, MASK, aggregation=aggregation, token_weights=torch.ones(2, 4)
    )
    plain, _ = policy_loss(logp, old, advantages, MASK, aggregation=aggregation)
    assert ones.item() == plain.item()
    with pytest.raises(ValueError, match="token_weights"):
        policy_loss(logp, old, advantages, MASK, token_weights=torch.ones(2, 3))


def _learned(
    tmp_path: Path, shift: float | None, cap: float | None = None
) -> tuple[dict, list[torch.Tensor]]:
    """One step of the tiny-random trainer on its own rollouts, the sampler's log-probs (when
    `shift` is not None) set to the trainer's rollout-policy log-probs minus `shift`, with the
    importance correction at `cap` (None: off); returns the step's first update's metrics plus
    the sampler difference, and the weights after."""
    from test_trainer import base_overrides

    from groupwise.train.preflight import load_run_config
    from groupwise.train.trainer import Trainer

    config = load_run_config(None, [*base_overrides(tmp_path), "rollout.temperature=0.7"])
    if cap is not None:  # the config refuses it without vLLM; the learner applies it as given
        config.rollout.importance_correction, config.rollout.importance_cap = True, cap
    trainer = Trainer(config)
    problems = trainer.sampler.batch(0)
    questions = list(range(len(problems)))
    batch = trainer._score(
        problems, questions, trainer._rollout(problems, questions, trainer.position)
    )
    if shift is not None:
        rollouts = batch.rollouts
        with torch.no_grad():
            old = trainer.passes.logprobs(rollouts, slice(0, len(rollouts)))
        sampler = (old - shift) * rollouts.completion_mask
        batch = dataclasses.replace(
            batch, rollouts=dataclasses.replace(rollouts, sampler_logp=sampler)
        )
    learned = trainer.learn(batch)
    weights = [p.detach().clone() for p in trainer.params]
    trainer.close()
    return {**learned.updates[0], **learned.sampler}, weights


def test_the_learner_ignores_the_sampler_without_the_correction(tmp_path: Path) -> None:
    """Correction off: the same loss and the same updated weights with or without the
    sampler's log-probs (the old policy is the trainer's own), and their difference logged."""
    plain, plain_weights = _learned(tmp_path / "plain", None)
    off, off_weights = _learned(tmp_path / "off", 0.25)
    assert "sampling_logp_difference" not in plain
    assert off["policy_loss"] == plain["policy_loss"]
    assert all(torch.equal(a, b) for a, b in zip(plain_weights, off_weights, strict=True))
    assert off["sampling_logp_difference"] == pytest.approx(0.25, abs=1e-5)
    assert off["sampling_logp_difference_max"] == pytest.approx(0.25, abs=1e-5)


def test_the_correction_weights_every_token_by_the_truncated_ratio(tmp_path: Path) -> None:
    """On-policy (ratio 1, nothing clipped) with the sampler 0.25 nats below the trainer on
    every token, each token's surrogate is multiplied by exp(0.25): the gradient (its norm,
    before clipping) scales by it exactly; with a cap of 1.1 < exp(0.25), by the cap. (The
    on-policy loss itself is mean -A, zero up to rounding with group-centred advantages.)"""
    plain, _ = _learned(tmp_path / "plain", None)
    on, _ = _learned(tmp_path / "on", 0.25, cap=3.0)
    capped, _ = _learned(tmp_path / "cap", 0.25, cap=1.1)
    assert plain["grad_norm"] > 0
    assert on["grad_norm"] == pytest.approx(math.exp(0.25) * plain["grad_norm"], rel=1e-4)
    assert capped["grad_norm"] == pytest.approx(1.1 * plain["grad_norm"], rel=1e-4)


def test_config_refuses_the_correction_without_vllm_and_vllm_with_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from groupwise.config import ConfigError
    from groupwise.train.config_file import load_config
    from groupwise.train.preflight import load_run_config

    with pytest.raises(ConfigError, match="importance_correction .* needs rollout.engine=vllm"):
        load_config(None, ["rollout.importance_correction=true"])
    with pytest.raises(ConfigError, match="rollout.importance_cap"):
        load_config(None, ["rollout.engine=vllm", "rollout.importance_cap=0.5"])
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="engine=vllm runs one engine in a single training"):
        load_run_config(None, ["rollout.engine=vllm", "rollout.questions_per_step=2"])
