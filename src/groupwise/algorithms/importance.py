"""The sampler mismatch of an engine that samples with other kernels, or other weights, than it
trains with (vLLM; a sampler that runs ahead of learning): the rollout correction's
importance weights of the policy loss and the metrics that measure the mismatch
(docs/algorithms.md, "Rollout correction"; docs/guides/train.md, "Rollout engine").

pi_old is the trainer's log-prob of a token at the rollout policy; pi_sampler is the sampler's
log-prob of the same token (what it actually drew from). The ratio rho = pi_old / pi_sampler,
per token, or per sequence as the product over its tokens, becomes a weight on the clipped
surrogate's per-token loss before aggregation, in one of TRL's four modes
(vllm_importance_sampling_mode):

    token_truncate     w_{i,t} = clamp(rho_{i,t}, floor, cap)
    token_mask         w_{i,t} = rho_{i,t} where floor <= rho_{i,t} <= cap, else 0
    sequence_truncate  w_{i,t} = clamp(prod_t rho_{i,t}, floor, cap)
    sequence_mask      w_{i,t} = prod_t rho_{i,t} where floor <= it <= cap, else 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "IMPORTANCE_MODES",
    "ImportanceCorrection",
    "importance_weights",
    "mismatch_metrics",
    "mismatch_sums",
]

ImportanceMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
IMPORTANCE_MODES: tuple[str, ...] = (
    "token_truncate",
    "token_mask",
    "sequence_truncate",
    "sequence_mask",
)
# verl's SAFETY_BOUND: log-ratios are clamped to +-20 before exp in the chi-square metrics
SAFETY_BOUND = 20.0


@dataclass(frozen=True)
class ImportanceCorrection:
    """A rollout correction: its mode (one of IMPORTANCE_MODES), the ratio's upper bound cap
    (>= 1) and lower bound floor (0 <= floor <= 1; 0 is no lower bound)."""

    mode: ImportanceMode = "token_truncate"
    cap: float = 3.0
    floor: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in IMPORTANCE_MODES:
            raise ValueError(
                f"mode must be one of {', '.join(IMPORTANCE_MODES)}, got {self.mode!r}"
            )
        if not self.cap >= 1:
            raise ValueError(f"cap must be >= 1, got {self.cap!r}")
        if not 0 <= self.floor <= 1:
            raise ValueError(f"floor must be within [0, 1], got {self.floor!r}")


def _check(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> Tensor:
    if old_logp.shape != sampler_logp.shape or tuple(mask.shape) != tuple(old_logp.shape):
        raise ValueError(
            f"old_logp {tuple(old_logp.shape)}, sampler_logp {tuple(sampler_logp.shape)} and "
            f"mask {tuple(mask.shape)} must have one shape [B, T]"
        )
    return mask.bool()


def _log_ratio(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> Tensor:
    """[B, T] log rho on the completion tokens, 0 elsewhere and where the sampler gave no
    log-prob (NaN): such a token is not corrected, as TRL does."""
    diff = (old_logp.detach() - sampler_logp.to(old_logp.dtype)).nan_to_num(nan=0.0)
    return torch.where(mask, diff, torch.zeros_like(diff))


def importance_weights(
    old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, correction: ImportanceCorrection
) -> Tensor:
    """Per-token weights [B, T] (detached) of the rollout correction (module docstring); a
    sequence mode gives each row's weight on all its positions.

    old_logp: [B, T] the trainer's log-probs at the rollout policy (nats). sampler_logp: [B, T]
    the sampler's log-probs of the same tokens. mask: [B, T] bool, True on the tokens the loss
    sees (a sequence's ratio is the product over them)."""
    mask = _check(old_logp, sampler_logp, mask)
    log_ratio = _log_ratio(old_logp, sampler_logp, mask)
    if correction.mode.startswith("sequence"):
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(log_ratio)
    ratio = log_ratio.exp()
    low, high = correction.floor, correction.cap
    if correction.mode.endswith("truncate"):
        return ratio.clamp(min=low, max=high)
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def mismatch_sums(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> dict[str, float]:
    """The additive parts and extremes of the sampler mismatch over the completion tokens that
    have a sampler log-prob, to be summed over processes, then read by mismatch_metrics: tokens,
    sequences (rows with such a token), and the sums over tokens of |log rho| ("abs_diff"),
    log pi_sampler - log pi_old ("k1"), rho - 1 - log rho ("k3"), rho^2 ("rho2"); the sum over
    sequences of (prod_t rho)^2 ("rho2_seq"); the largest |log rho| ("abs_max") and the largest
    and smallest token rho ("ratio_max", "ratio_min"; 1 without tokens). Shapes as
    importance_weights."""
    mask = _check(old_logp, sampler_logp, mask) & ~sampler_logp.isnan()
    log_ratio = _log_ratio(old_logp, sampler_logp, mask).double()
    tokens = log_ratio[mask]
    rows = mask.any(dim=-1)
    safe = tokens.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    sequence = log_ratio.sum(dim=-1)[rows].clamp(-SAFETY_BOUND, SAFETY_BOUND)
    empty = tokens.numel() == 0
    return {
        "tokens": float(tokens.numel()),
        "sequences": float(rows.sum()),
        "abs_diff": float(tokens.abs().sum()),
        "k1": float(-tokens.sum()),
        "k3": float((tokens.exp() - 1 - tokens).sum()),
        "rho2": float((2 * safe).exp().sum()),
        "rho2_seq": float((2 * sequence).exp().sum()),
        "abs_max": 0.0 if empty else float(tokens.abs().max()),
        "ratio_max": 1.0 if empty else float(tokens.max().exp()),
        "ratio_min": 1.0 if empty else float(tokens.min().exp()),
    }


def mismatch_metrics(sums: dict[str, float]) -> dict[str, float]:
    """The mismatch's metrics from mismatch_sums (over every process), named as metrics.jsonl
    logs them (docs/algorithms.md, "Rollout correction"): sampling_logp_difference (mean
    |log rho| per token, TRL's) and its _max; sampler_kl (k1) and sampler_k3_kl, estimates of
    KL(pi_sampler || pi_old) per token, and sampler_chi2_token, sampler_chi2_seq (E[rho^2] - 1
    per token and per sequence), as verl's compute_offpolicy_metrics; sampler_ratio_max and
    _min, the extreme token ratios. All 0 (ratios 1) without tokens."""
    tokens, sequences = max(sums["tokens"], 1.0), max(sums["sequences"], 1.0)
    some = sums["tokens"] > 0
    return {
        "sampling_logp_difference": sums["abs_diff"] / tokens,
        "sampling_logp_difference_max": sums["abs_max"],
        "sampler_kl": sums["k1"] / tokens,
        "sampler_k3_kl": sums["k3"] / tokens,
        "sampler_chi2_token": sums["rho2"] / tokens - 1 if some else 0.0,
        "sampler_chi2_seq": sums["rho2_seq"] / sequences - 1 if some else 0.0,
        "sampler_ratio_max": sums["ratio_max"],
        "sampler_ratio_min": sums["ratio_min"],
    }
