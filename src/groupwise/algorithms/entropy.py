"""Entropy controls (docs/algorithms.md, "Entropy controls"): the high-entropy token mask of
"Beyond the 80/20 Rule" and Skywork-OR1's adaptive entropy coefficient.

The per-token entropies come from the same chunked pass as the log-probs
(`token_logprobs_and_entropy`, logprobs.py), computed only when an entropy option is on; the
entropy bonus itself is a term of `loss_terms` (objective.py).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def high_entropy_mask(entropy: Tensor, mask: Tensor, quantile: float) -> Tensor:
    """The tokens whose entropy is among the top `quantile` of the masked tokens: H_t >= the
    (1 - quantile)-quantile of {H_t : mask} (torch.quantile, linear interpolation), as TRL's
    `get_high_entropy_mask` (docs/algorithms.md, "Entropy controls").

    Args:
        entropy: [B, T] per-token entropies (nats); only its values are read.
        mask: [B, T] bool or 0/1, True on the tokens that take part.
        quantile: rho in [0, 1]; 1 keeps every masked token, 0 only the highest-entropy ones.

    Returns:
        [B, T] bool, a subset of mask (all False when mask is empty).
    """
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must lie in [0, 1], got {quantile}")
    if not isinstance(entropy, Tensor) or entropy.dim() != 2 or entropy.shape != mask.shape:
        raise ValueError("entropy and mask must be tensors of one shape [B, T]")
    mask = mask.bool()
    values = entropy.detach()[mask].float()
    if values.numel() == 0:
        return torch.zeros_like(mask)
    threshold = torch.quantile(values, 1.0 - quantile)
    return (entropy.detach().float() >= threshold) & mask


class AdaptiveEntropy:
    """Skywork-OR1's adaptive entropy coefficient (docs/algorithms.md, "Entropy controls").

    After each optimizer update the trainer reports the update's mean token entropy e_k
    (`observe`): the coefficient c grows by delta while e_k <= target and shrinks by delta
    otherwise, within [min_value, max_value]; the bonus applied in the next update (`applied`)
    is c where the last e_k <= target and 0 where it was above (none before the first
    measurement), so the bonus acts only once entropy has fallen to the target.

    State: value (c), last (e_k of the last update; inf before any). Saved with checkpoints
    through state_dict / load_state_dict.
    """

    def __init__(
        self,
        init: float,
        target: float,
        delta: float = 0.005,
        min_value: float = 0.0,
        max_value: float = 1.0,
    ) -> None:
        if not min_value <= init <= max_value:
            raise ValueError(f"init must lie in [{min_value}, {max_value}], got {init}")
        if delta < 0 or target < 0:
            raise ValueError(f"delta and target must be >= 0, got {delta} and {target}")
        self.value, self.target, self.delta = float(init), float(target), float(delta)
        self.min_value, self.max_value = float(min_value), float(max_value)
        self.last = math.inf

    @property
    def applied(self) -> float:
        """The coefficient of the next update's entropy bonus."""
        return self.value if self.last <= self.target else 0.0

    def observe(self, entropy: float) -> None:
        """One update's mean token entropy (nats): move the coefficient toward the target."""
        if entropy <= self.target:
            self.value = min(self.value + self.delta, self.max_value)
        else:
            self.value = max(self.value - self.delta, self.min_value)
        self.last = float(entropy)

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value, "last": self.last}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value, self.last = float(state["value"]), float(state["last"])
