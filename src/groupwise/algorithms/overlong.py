"""Completions near or at the length limit (docs/algorithms.md, "Overlong completions").

DAPO (arXiv 2503.14476, section 3.4) treats them two ways, both here:

- soft overlong punishment (Eq. 13): a reward that falls linearly from 0 to -1 over the last
  `buffer` tokens before the limit L_max (TRL's `get_soft_overlong_punishment`, verl's
  `overlong_buffer_cfg`, which scales it by a penalty factor: the reward weight here);
- overlong filtering: truncated completions masked out of the loss (TRL's
  `mask_truncated_completions`). They stay in their group's statistics (mean, std, LENS's
  difficulty and confidences) and leave only the loss; AMIR forms no pair with them, since a
  pair's term would put their log-likelihood back into the loss (`pairs_without`).
"""

from __future__ import annotations

import torch
from torch import Tensor


def soft_overlong_punishment(lengths: Tensor, max_length: int, buffer: int) -> Tensor:
    """DAPO's Eq. 13: [B] rewards in [-1, 0] for completion lengths [B] (tokens).

        R = 0                                   |o| <= L_max - buffer
        R = ((L_max - buffer) - |o|) / buffer   L_max - buffer < |o| <= L_max
        R = -1                                  |o| > L_max

    max_length: L_max in tokens (the generation limit); buffer: L_cache, in [1, L_max].
    """
    if not 1 <= buffer <= max_length:
        raise ValueError(f"buffer must be in [1, max_length={max_length}], got {buffer}")
    expected = max_length - buffer
    excess = (lengths.to(torch.get_default_dtype()) - expected).clamp(min=0)
    return (-excess / buffer).clamp(min=-1.0)


def pairs_without(chosen: Tensor, rejected: Tensor, excluded: Tensor) -> tuple[Tensor, Tensor]:
    """The AMIR pairs (row indices [P]) in which neither side is an `excluded` ([B] bool) row."""
    keep = ~(excluded[chosen] | excluded[rejected])
    return chosen[keep], rejected[keep]
