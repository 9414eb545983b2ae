"""groupwise.train.update: one optimizer update (clip, step, schedule) computed by hand, for
AdamW and plain SGD."""

from __future__ import annotations

import math

import pytest
import torch

from groupwise.train.config import OptimConfig
from groupwise.train.distributed import Distributed
from groupwise.train.update import MicroBatchLoss, optimizer_updater


def one_update(optim: OptimConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """w = [1, 2] after the first update on the loss 3 w0 + 4 w1 (gradient [3, 4], norm 5),
    given as two micro-batches whose gradients add up to it (no warm-up: the first update's
    learning rate is the peak under every schedule)."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    updater = optimizer_updater([w], optim, 10, Distributed(), step=lambda: 1, hint=lambda: "")
    micro = [MicroBatchLoss(w[0] * 3.0, {"n": 1.0}), MicroBatchLoss(w[1] * 4.0, {"n": 2.0})]
    for part in micro:
        updater.backward(part)
    return w.detach(), updater.apply(micro)


def test_sgd_moves_the_weights_by_lr_times_the_clipped_gradient() -> None:
    optim = OptimConfig(
        optimizer="sgd", lr=0.5, max_grad_norm=1.0, weight_decay=0.0, warmup_ratio=0.0
    )
    w, metrics = one_update(optim)
    # clipped to norm 1: [0.6, 0.8]; w - 0.5 x that
    torch.testing.assert_close(w, torch.tensor([0.7, 1.6]), rtol=0, atol=1e-6)
    assert metrics["grad_norm"] == pytest.approx(5.0)
    assert metrics["learning_rate"] == 0.5 and metrics["n"] == 3.0


def test_sgd_weight_decay_is_added_to_the_gradient() -> None:
    optim = OptimConfig(
        optimizer="sgd", lr=0.5, max_grad_norm=1.0, weight_decay=0.1, warmup_ratio=0.0
    )
    w, _ = one_update(optim)
    # after clipping, + 0.1 w: [0.6 + 0.1, 0.8 + 0.2]
    torch.testing.assert_close(w, torch.tensor([1 - 0.5 * 0.7, 2 - 0.5 * 1.0]), rtol=0, atol=1e-6)


def test_adamw_first_update_is_lr_times_the_sign_after_decoupled_decay() -> None:
    optim = OptimConfig(lr=0.5, max_grad_norm=1.0, weight_decay=0.1, warmup_ratio=0.0)
    assert optim.optimizer == "adamw"
    w, _ = one_update(optim)
    # first step: m_hat = g, v_hat = g^2, so the step is lr g / (|g| + eps), after w *= 1 - lr wd
    g = torch.tensor([0.6, 0.8])
    expected = torch.tensor([1.0, 2.0]) * (1 - 0.5 * 0.1) - 0.5 * g / (g.abs() + 1e-8)
    torch.testing.assert_close(w, expected, rtol=0, atol=1e-6)


def test_schedule_warms_up_then_decays() -> None:
    optim = OptimConfig(optimizer="sgd", lr=1.0, warmup_ratio=0.2, schedule="cosine")
    w = torch.zeros(1, requires_grad=True)
    updater = optimizer_updater([w], optim, 10, Distributed(), step=lambda: 1, hint=lambda: "")
    rates = []
    for _ in range(10):
        (w * 0.0).sum().backward()
        rates.append(updater.apply([])["learning_rate"])
    # 2 warm-up updates at 1/3, 2/3, then cosine over the remaining 8
    expected = [1 / 3, 2 / 3] + [0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(8)]
    assert rates == pytest.approx(expected)
