"""Error types shared across the package's layers (it imports nothing of groupwise).

NonFiniteError: a NaN or an infinity where training or sampling needs a finite number (a
diverged policy). The sampler raises it on logits (groupwise.rollout), the trainer on losses and
gradient norms through `check_finite`, before any optimizer step uses them.
RewardError: a reward component (often a user's plugin) that raised or returned something other
than a finite number; `groupwise train` reports it as a user error.
"""

from __future__ import annotations

import math

import torch

__all__ = ["NonFiniteError", "RewardError", "check_finite"]


class NonFiniteError(FloatingPointError):
    """A non-finite value that training must not go on with.

    what: what was non-finite, with whatever detail locates it (e.g. "logits (NaN in rows
        [0, 3] at completion token 12)", "gradient norm (inf)").
    step: the training step it happened in (1-based, as metrics.jsonl counts), when known.
    hint: what the user can do about it (e.g. "lower optim.lr (now 1e+10)").
    """

    def __init__(self, what: str, step: int | None = None, hint: str = "") -> None:
        self.what, self.step, self.hint = what, step, hint
        where = f"step {step}: " if step is not None else ""
        tail = f"; {hint}" if hint else ""
        super().__init__(f"{where}non-finite {what}{tail}")

    def at_step(self, step: int, hint: str = "") -> NonFiniteError:
        """The same error located at training step `step`; `hint`, when given, replaces its own
        (the trainer knows the settings to name, e.g. the learning rate)."""
        return NonFiniteError(self.what, step, hint or self.hint)


class RewardError(ValueError):
    """A reward component raised, or returned anything but a finite real number; the message
    names the component, the function that implements it and the completion."""


def check_finite(
    value: float | torch.Tensor, what: str, *, step: int | None = None, hint: str = ""
) -> None:
    """Raise NonFiniteError(what, step, hint) unless `value` (a number, or a tensor of any
    shape: all its elements) is finite. One device sync for a tensor."""
    if isinstance(value, torch.Tensor):
        finite = bool(torch.isfinite(value).all())
        shown = f"{float(value):g}" if value.numel() == 1 else "some elements"
    else:
        finite = math.isfinite(value)
        shown = f"{value:g}"
    if not finite:
        raise NonFiniteError(f"{what} ({shown})", step, hint)
