"""train.precision=bfloat16 (docs/guides/train.md, "Mixed precision"): the training passes run
their matmuls in bfloat16 under torch.autocast, while the weights, the LoRA adapters, the
optimizer state and the log-probs stay float32; on the tiny-random trainer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_trainer import base_overrides

from groupwise.config import ConfigError
from groupwise.train.preflight import load_run_config
from groupwise.train.trainer import Trainer


def _trainer(tmp_path: Path, precision: str) -> Trainer:
    return Trainer(
        load_run_config(None, [*base_overrides(tmp_path), f"train.precision={precision}"])
    )


def _rollouts(trainer: Trainer):
    problems = trainer.sampler.batch(0)
    questions = list(range(len(problems)))
    return trainer.batches.rollout(problems, questions, trainer.batches.position)


def test_bfloat16_passes_keep_float32_log_probs_and_gradients_near_float32(tmp_path) -> None:
    """The same weights and completions: the bfloat16 pass's log-probs are float32, within
    bfloat16's rounding of the float32 pass's and not equal to them (the matmuls did run in
    bfloat16); the gradient of their sum reaches the float32 adapters, within a few percent."""
    full = _trainer(tmp_path / "fp32", "float32")
    mixed = _trainer(tmp_path / "bf16", "bfloat16")
    mixed.model.load_state_dict(full.model.state_dict())
    rollouts = _rollouts(full)
    rows = slice(0, len(rollouts))
    mask = rollouts.completion_mask.bool()
    results = []
    for trainer in (full, mixed):
        trainer.model.zero_grad()
        logp = trainer.passes.logprobs(rollouts, rows)
        logp[mask].sum().backward()
        grads = torch.cat([p.grad.reshape(-1) for p in trainer.params])
        results.append((logp.detach(), grads))
        assert logp.dtype == torch.float32
        assert all(p.dtype == torch.float32 for p in trainer.params)
    (logp32, grad32), (logp16, grad16) = results
    difference = (logp16 - logp32)[mask].abs()
    assert 0 < float(difference.max()) < 0.1
    cosine = torch.nn.functional.cosine_similarity(grad16, grad32, dim=0)
    assert float(cosine) > 0.99
    assert float((grad16 - grad32).norm() / grad32.norm()) < 0.1
    full.close()
    mixed.close()


def test_a_bfloat16_step_trains_the_float32_weights(tmp_path) -> None:
    """One step in bfloat16: the adapters move and stay float32, as does the optimizer's state."""
    trainer = _trainer(tmp_path, "bfloat16")
    before = [p.detach().clone() for p in trainer.params]
    trainer.train()
    after = list(trainer.params)
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert all(p.dtype == torch.float32 for p in after)
    state = trainer.updater.optimizer.state_dict()["state"]
    assert state and all(
        t.dtype == torch.float32
        for s in state.values()
        for t in s.values()
        if t.is_floating_point()
    )
    trainer.close()


def test_bfloat16_passes_need_float32_weights() -> None:
    with pytest.raises(ConfigError, match=r"train.precision=bfloat16 runs float32 weights' pass"):
        load_run_config(None, ["train.precision=bfloat16", "model.dtype=bfloat16"])
