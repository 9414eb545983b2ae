"""Gradient probes: a part of each micro-batch's loss whose gradient is kept apart from .grad.

A probe's buffers are summed over micro-batches and over processes together with the gradient
(train.update), then read around clipping. Two uses:

- `PreferenceGradient` (algorithm.lambda_measure=grad, docs/algorithms.md §2): the AMIR term is left
  out of the loss and its gradient kept apart; before clipping, lambda is updated from
  ||grad L_GRPO|| and ||grad L_pref||, then lambda times the kept gradient joins .grad.
- `AllWrongGradient` (train.log_all_wrong_gradient, docs/algorithms.md §3): the gradient of the rows
of
  groups with no correct answer, also part of the loss; after clipping, its norm and its share
  of the update's gradient norm.
"""

from __future__ import annotations

import torch

from groupwise.algorithms import AdaptiveLambda


class GradientProbe:
    """Keeps d(part)/d(params) of every part `add`ed, in buffers shaped like params."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.buffers = [torch.zeros_like(p) for p in params]

    def add(self, part: torch.Tensor) -> None:
        """Add the gradient of `part`, keeping the graph for the micro-batch's own backward."""
        grads = torch.autograd.grad(part, self.params, retain_graph=True, allow_unused=True)
        for buffer, grad in zip(self.buffers, grads, strict=True):
            if grad is not None:
                buffer.add_(grad)

    def before_clip(self) -> None:
        """Called after the all-reduce, before clipping; nothing by default."""

    def after_clip(self, grad_norm: float) -> dict[str, float]:
        """The update's metrics from this probe, given the pre-clip gradient norm."""
        return {}

    def norm(self) -> float:
        """The norm of the kept gradient over all parameters."""
        return float(torch.sqrt(sum((b.float() ** 2).sum() for b in self.buffers)))


class PreferenceGradient(GradientProbe):
    """lambda_measure=grad: ratio = lambda ||grad L_pref|| / ||grad L_GRPO||, measured on the
    update's whole gradient (every micro-batch and process), then lambda x grad L_pref added."""

    def __init__(self, params: list[torch.Tensor], lambda_reg: AdaptiveLambda) -> None:
        super().__init__(params)
        self.lambda_reg = lambda_reg

    def before_clip(self) -> None:
        grpo_norm = torch.sqrt(
            sum((p.grad.float() ** 2).sum() for p in self.params if p.grad is not None)
        )
        self.lambda_reg.observe_gradient_norms(float(grpo_norm), self.norm())
        for p, g in zip(self.params, self.buffers, strict=True):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.add_(g, alpha=self.lambda_reg.value)


class AllWrongGradient(GradientProbe):
    """train.log_all_wrong_gradient: the all-wrong rows' gradient norm and its ratio to the
    update's (pre-clip) gradient norm; 0 when the update has no gradient. The parts are not
    orthogonal, so the ratio can exceed 1 where the other rows' gradient partly cancels it."""

    def after_clip(self, grad_norm: float) -> dict[str, float]:
        norm = self.norm()
        return {
            "all_wrong_grad_norm": norm,
            "all_wrong_grad_share": norm / grad_norm if grad_norm > 0 else 0.0,
        }
