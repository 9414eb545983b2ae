"""One optimizer update: each micro-batch's loss -> backward; then all-reduce -> clip -> step.

The caller hands over each micro-batch's loss already weighted by its share of the update's
global batch (groupwise.algorithms.micro_batch_share), so the summed gradients of the
micro-batches and processes are the gradient of the whole update (docs/algorithms.md §1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from groupwise.errors import check_finite
from groupwise.train.config import OptimConfig
from groupwise.train.distributed import Distributed
from groupwise.train.probes import GradientProbe


@dataclass(frozen=True)
class MicroBatchLoss:
    """loss: the micro-batch's part of the update's loss (a scalar with gradient).
    metrics: its part of the update's metrics, each already a share of a global count (summed
    over micro-batches and processes)."""

    loss: torch.Tensor
    metrics: dict[str, float]


class Updater:
    """The trainable parameters' optimizer, schedule and gradient clipping, over processes.

    step: the run's step (1-based) for error messages; hint: what to do about a non-finite
    value (both callables, read when needed)."""

    def __init__(
        self,
        params: list[torch.Tensor],
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        dist: Distributed,
        max_grad_norm: float,
        step: Callable[[], int],
        hint: Callable[[], str],
    ) -> None:
        self.params, self.optimizer, self.scheduler = params, optimizer, scheduler
        self.dist, self.max_grad_norm = dist, max_grad_norm
        self.step, self.hint = step, hint

    def backward(self, micro: MicroBatchLoss) -> None:
        """Add the micro-batch's gradient to the update's (its loss must be finite); called for
        each micro-batch as it comes, so that one graph at a time is held."""
        check_finite(micro.loss.detach(), "loss", step=self.step(), hint=self.hint())
        micro.loss.backward()

    def apply(
        self, micro_batches: Sequence[MicroBatchLoss], probes: Sequence[GradientProbe] = ()
    ) -> dict[str, float]:
        """Once every micro-batch of the update went through `backward`: sum the gradients (and
        the probes' buffers) over processes in one all-reduce, clip, step. Returns the update's
        metrics: the micro-batches' sums, grad_norm (before clipping), learning_rate and the
        probes'."""
        sums: dict[str, float] = {}
        for micro in micro_batches:
            for key, value in micro.metrics.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        self.dist.sum_gradients(self.params, [b for probe in probes for b in probe.buffers])
        for probe in probes:
            probe.before_clip()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm))
        diagnostics = {k: v for probe in probes for k, v in probe.after_clip(grad_norm).items()}
        # The norm is the same on every process (after the all-reduce): all stop together,
        # before the step, so the weights and the last checkpoint stay as they were.
        check_finite(grad_norm, "gradient norm", step=self.step(), hint=self.hint())
        learning_rate = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        keys = sorted(sums)  # the same keys in the same order on every process
        totals = dict(zip(keys, self.dist.sum([sums[k] for k in keys]), strict=True))
        return {**totals, "grad_norm": grad_norm, "learning_rate": learning_rate, **diagnostics}


def optimizer_updater(
    params: list[torch.Tensor],
    optim: OptimConfig,
    updates: int,
    dist: Distributed,
    step: Callable[[], int],
    hint: Callable[[], str],
) -> Updater:
    """The `optim:` section's optimizer (AdamW, or plain SGD) over `params`, with its settings
    and learning-rate schedule over `updates` optimizer updates (the run's steps x mini-batches
    x epochs)."""
    if optim.optimizer == "sgd":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(
            params, lr=optim.lr, weight_decay=optim.weight_decay
        )
    else:
        optimizer = torch.optim.AdamW(
            params, lr=optim.lr, betas=(optim.beta1, optim.beta2), weight_decay=optim.weight_decay
        )
    scheduler = _schedule(optimizer, optim.schedule, optim.warmup_ratio, updates)
    return Updater(params, optimizer, scheduler, dist, optim.max_grad_norm, step=step, hint=hint)


def _schedule(
    optimizer: torch.optim.Optimizer, name: str, warmup_ratio: float, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ceil(warmup_ratio * total) updates, then cosine/linear/constant."""
    warmup = math.ceil(warmup_ratio * total)

    def factor(update: int) -> float:
        if update < warmup:
            return (update + 1) / (warmup + 1)
        progress = (update - warmup) / max(1, total - warmup)
        if name == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        if name == "linear":
            return max(0.0, 1.0 - progress)
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
