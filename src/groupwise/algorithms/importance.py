"""The sampler mismatch of an engine that samples with other kernels than it trains with (vLLM):
the truncated importance-sampling weights of the policy loss and the log-prob difference that
measures the mismatch (docs/algorithms.md §1; docs/guides/train.md, "Rollout engine").

The old policy of the ratio stays the trainer's own: pi_old is the trainer's log-prob of a token
at the rollout policy; pi_sampler is the sampler's log-prob of the same token (what it actually
drew from). TRL's vllm_importance_sampling_correction in its token_truncate mode:

    w_{i,t} = min(exp(logp_old_{i,t} - logp_sampler_{i,t}), cap)

multiplies the clipped surrogate's per-token loss before aggregation.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["sampling_logp_difference", "truncated_importance_weights"]


def _check(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> Tensor:
    if old_logp.shape != sampler_logp.shape or tuple(mask.shape) != tuple(old_logp.shape):
        raise ValueError(
            f"old_logp {tuple(old_logp.shape)}, sampler_logp {tuple(sampler_logp.shape)} and "
            f"mask {tuple(mask.shape)} must have one shape [B, T]"
        )
    return mask.bool()


def truncated_importance_weights(
    old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, cap: float
) -> Tensor:
    """Per-token weights [B, T] (detached): min(exp(old_logp - sampler_logp), cap) on the
    completion tokens, 1 elsewhere and where the sampler gave no log-prob (NaN), as TRL does.

    old_logp: [B, T] the trainer's log-probs at the rollout policy (nats). sampler_logp: [B, T]
    the sampler's log-probs of the same tokens. mask: [B, T] bool, True on completion tokens.
    cap: >= 1."""
    if not cap >= 1:
        raise ValueError(f"cap must be >= 1, got {cap!r}")
    mask = _check(old_logp, sampler_logp, mask)
    diff = (old_logp.detach() - sampler_logp.to(old_logp.dtype)).nan_to_num(nan=0.0)
    diff = torch.where(mask, diff, torch.zeros_like(diff))
    return diff.exp().clamp(max=cap)


def sampling_logp_difference(
    old_logp: Tensor, sampler_logp: Tensor, mask: Tensor
) -> dict[str, float]:
    """|old_logp - sampler_logp| over the completion tokens: {"mean", "max"} (nats; 0 without
    tokens), as TRL's sampling/sampling_logp_difference. Shapes as truncated_importance_weights."""
    mask = _check(old_logp, sampler_logp, mask)
    diff = (old_logp.detach().float() - sampler_logp.float()).abs()[mask]
    diff = diff[~diff.isnan()]
    if diff.numel() == 0:
        return {"mean": 0.0, "max": 0.0}
    return {"mean": float(diff.mean()), "max": float(diff.max())}
