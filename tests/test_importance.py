"""groupwise.algorithms.importance: the rollout correction's weights in its four modes and the
mismatch metrics, against the formulas written out by hand; their place in policy_loss (per
token, before aggregation); and the learner's use of them. (verl's own functions on the same
tensors: tests/test_verl_rollout_correction.py.)"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from groupwise.algorithms import (
    ImportanceCorrection,
    importance_weights,
    mismatch_metrics,
    mismatch_sums,
    policy_loss,
)

OLD = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.3, -4.0, -1.0, -1.0]])
SAMPLER = torch.tensor([[-1.5, -0.5, -0.5, 0.0], [-3.0, float("nan"), -1.1, 0.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
# log rho on the masked tokens with a sampler log-prob: row 0: 0.5, -1.5, 0; row 1: 2.7, 0.1, -1
ROW_LOG_RATIO = (-1.0, 1.8)


def _weights(mode: str, cap: float = 3.0, floor: float = 0.0) -> torch.Tensor:
    return importance_weights(OLD, SAMPLER, MASK, ImportanceCorrection(mode, cap, floor))


def test_token_truncate_is_the_clamped_ratio_token_by_token() -> None:
    cap = 3.0
    weights = _weights("token_truncate", cap)
    for i in range(2):
        for t in range(4):
            if not MASK[i, t] or math.isnan(SAMPLER[i, t]):
                want = 1.0
            else:
                want = min(math.exp(OLD[i, t] - SAMPLER[i, t]), cap)
            assert weights[i, t].item() == pytest.approx(want, rel=1e-6), (i, t)
    # row 1, token 0: exp(2.7) = 14.9 is cut at the cap; row 0, token 1: exp(-1.5) is kept
    assert weights[1, 0].item() == cap and weights[0, 1].item() == pytest.approx(math.exp(-1.5))
    # a floor of 0.5 lifts exp(-1.5) = 0.22 to it
    assert _weights("token_truncate", cap, 0.5)[0, 1].item() == 0.5
    same = ImportanceCorrection("token_truncate", 1.0)
    assert importance_weights(OLD, OLD, MASK, same).eq(1.0).all()


def test_token_mask_zeroes_the_tokens_outside_the_bounds() -> None:
    weights = _weights("token_mask")
    assert weights[1, 0].item() == 0.0  # exp(2.7) > 3
    assert weights[0, 1].item() == pytest.approx(math.exp(-1.5))
    assert weights[0, 0].item() == pytest.approx(math.exp(0.5))
    assert weights[1, 1].item() == 1.0  # no sampler log-prob: not corrected
    floored = _weights("token_mask", floor=0.5)
    assert floored[0, 1].item() == 0.0 and floored[1, 3].item() == 0.0  # exp(-1) = 0.37 < 0.5
    assert floored[1, 2].item() == pytest.approx(math.exp(0.1))


def test_sequence_modes_weight_every_token_by_the_product_of_the_ratios() -> None:
    truncated = _weights("sequence_truncate")
    assert torch.allclose(truncated[0], torch.full((4,), math.exp(ROW_LOG_RATIO[0])))
    assert truncated[1].eq(3.0).all()  # exp(1.8) = 6.05 cut at the cap
    masked = _weights("sequence_mask")
    assert torch.allclose(masked[0], torch.full((4,), math.exp(ROW_LOG_RATIO[0])))
    assert masked[1].eq(0.0).all()
    assert _weights("sequence_mask", cap=7.0)[1, 0].item() == pytest.approx(math.exp(1.8))
    assert _weights("sequence_mask", floor=0.5)[0].eq(0.0).all()
    assert _weights("sequence_truncate", floor=0.5)[0].eq(0.5).all()


def test_weights_carry_no_gradient_and_bad_settings_are_refused() -> None:
    old = OLD.clone().requires_grad_(True)
    assert not importance_weights(old, SAMPLER, MASK, ImportanceCorrection()).requires_grad
    with pytest.raises(ValueError, match="cap must be >= 1"):
        ImportanceCorrection(cap=0.5)
    with pytest.raises(ValueError, match="floor must be within"):
        ImportanceCorrection(floor=1.5)
    with pytest.raises(ValueError, match="mode must be one of token_truncate"):
        ImportanceCorrection("token_clip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one shape"):
        importance_weights(OLD, SAMPLER[:, :3], MASK, ImportanceCorrection())


def test_mismatch_metrics_by_hand() -> None:
    tokens = [0.5, -1.5, 0.0, 2.7, 0.1, -1.0]
    found = mismatch_metrics(mismatch_sums(OLD, SAMPLER, MASK))
    want = {
        "sampling_logp_difference": sum(abs(x) for x in tokens) / 6,
        "sampling_logp_difference_max": 2.7,
        "sampler_kl": -sum(tokens) / 6,
        "sampler_k3_kl": sum(math.exp(x) - 1 - x for x in tokens) / 6,
        "sampler_chi2_token": sum(math.exp(2 * x) for x in tokens) / 6 - 1,
        "sampler_chi2_seq": sum(math.exp(2 * x) for x in ROW_LOG_RATIO) / 2 - 1,
        "sampler_ratio_max": math.exp(2.7),
        "sampler_ratio_min": math.exp(-1.5),
    }
    assert found == pytest.approx(want, rel=1e-5)
    # k3 and chi-square are >= 0 and 0 at equal policies
    same = mismatch_metrics(mismatch_sums(OLD, OLD, MASK))
    assert same["sampler_k3_kl"] == 0 and same["sampler_chi2_token"] == pytest.approx(0, abs=1e-12)
    assert same["sampler_ratio_max"] == same["sampler_ratio_min"] == 1.0
    empty = mismatch_metrics(mismatch_sums(OLD, SAMPLER, torch.zeros_like(MASK)))
    assert empty["sampling_logp_difference"] == empty["sampler_chi2_seq"] == 0.0
    assert empty["sampler_ratio_max"] == 1.0


def test_mismatch_sums_add_up_over_processes() -> None:
    """Two processes' sums, added, give the metrics of the whole batch: what the learner's
    dist.sum relies on."""
    whole = mismatch_sums(OLD, SAMPLER, MASK)
    parts = [mismatch_sums(OLD[i : i + 1], SAMPLER[i : i + 1], MASK[i : i + 1]) for i in (0, 1)]
    for key in ("tokens", "sequences", "abs_diff", "k1", "k3", "rho2", "rho2_seq"):
        assert parts[0][key] + parts[1][key] == pytest.approx(whole[key], rel=1e-9), key


@pytest.mark.parametrize("aggregation", ["grpo", "dapo", "dr_grpo"])
def test_policy_loss_weights_each_token_before_aggregation(aggregation: str) -> None:
    """The weighted loss and its gradient equal the written-out weighted surrogate; weights of
    1 give the unweighted loss exactly."""
    generator = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 4, generator=generator) * 2).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(2, 4, generator=generator)
    advantages = torch.tensor([1.0, -0.7])
    sampler = SAMPLER.nan_to_num(-1.0)
    weights = importance_weights(old, sampler, MASK, ImportanceCorrection(cap=3.0))
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
    tmp_path: Path, shift: float | None, cap: float | None = None, mode: str = "token_truncate"
) -> tuple[dict, list[torch.Tensor]]:
    """One step of the tiny-random trainer on its own rollouts, the sampler's log-probs (when
    `shift` is not None) set to the trainer's rollout-policy log-probs minus `shift`, with the
    rollout correction in `mode` at `cap` (None: off); returns the step's first update's
    metrics plus the sampler mismatch, and the weights after."""
    from test_trainer import base_overrides

    from groupwise.train.preflight import load_run_config
    from groupwise.train.trainer import Trainer

    config = load_run_config(None, [*base_overrides(tmp_path), "rollout.temperature=0.7"])
    if cap is not None:  # the config refuses it without vLLM; the learner applies it as given
        config.rollout.importance_correction, config.rollout.importance_cap = True, cap
        config.rollout.importance_mode = mode
    trainer = Trainer(config)
    problems = trainer.sampler.batch(0)
    questions = list(range(len(problems)))
    batch = trainer.batches.score(
        problems, questions, trainer.batches.rollout(problems, questions, trainer.batches.position)
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
    # log rho = 0.25 on every token: KL(pi_sampler || pi_old) by k1 is -0.25, by k3 e^0.25 - 1.25
    assert off["sampler_kl"] == pytest.approx(-0.25, abs=1e-5)
    assert off["sampler_k3_kl"] == pytest.approx(math.exp(0.25) - 1.25, abs=1e-5)
    assert off["sampler_ratio_max"] == pytest.approx(math.exp(0.25), rel=1e-5)


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


def test_the_learner_applies_the_sequence_and_mask_modes(tmp_path: Path) -> None:
    """With the sampler 0.25 nats below the trainer on every token and a cap of 1.1: every
    sequence's ratio exp(0.25 L) is above it, so sequence_truncate scales the gradient by the
    cap, as token_truncate does; token_mask and sequence_mask take every token out of the loss
    (no gradient); a cap above every sequence's ratio keeps token_mask's exp(0.25) per token."""
    plain, _ = _learned(tmp_path / "plain", None)
    sequence, _ = _learned(tmp_path / "seq", 0.25, cap=1.1, mode="sequence_truncate")
    masked, _ = _learned(tmp_path / "mask", 0.25, cap=1.1, mode="token_mask")
    seq_masked, _ = _learned(tmp_path / "seq_mask", 0.25, cap=1.1, mode="sequence_mask")
    kept, _ = _learned(tmp_path / "kept", 0.25, cap=1e9, mode="token_mask")
    assert sequence["grad_norm"] == pytest.approx(1.1 * plain["grad_norm"], rel=1e-4)
    assert masked["grad_norm"] == 0.0 and seq_masked["grad_norm"] == 0.0
    assert kept["grad_norm"] == pytest.approx(math.exp(0.25) * plain["grad_norm"], rel=1e-4)


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
    with pytest.raises(ConfigError, match="rollout.importance_floor"):
        load_config(None, ["rollout.engine=vllm", "rollout.importance_floor=2"])
    with pytest.raises(ConfigError, match="rollout.importance_mode"):
        load_config(None, ["rollout.engine=vllm", "rollout.importance_mode=sequence"])
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="engine=vllm runs one engine in a single training"):
        load_run_config(None, ["rollout.engine=vllm", "rollout.questions_per_step=2"])
