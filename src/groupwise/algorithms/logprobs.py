"""Per-token log-probabilities from logits, and their length-normalised mean.

docs/algorithms.md §1 (logp_theta of the importance ratio) and §2 (the
length-normalised log-likelihood l(q, o) of AMIR-GRPO; LENS's pbar = exp of it, §3).
"""

from __future__ import annotations

import torch
from torch import Tensor

from groupwise.algorithms.advantages import _as_bool


def token_logprobs(logits: Tensor, tokens: Tensor, chunk_size: int = 512) -> Tensor:
    """log softmax(logits)[token] for every position, without a full-vocabulary float32 copy.

    logits[b, t] must already be the scores that predict tokens[b, t] (the caller shifts the
    causal-LM output by one and divides by the sampling temperature if it wants to).

    The [B*T] positions are processed in chunks of `chunk_size` rows: each chunk is cast to
    float32, its logsumexp taken, and the token's logit gathered, so the forward pass holds
    at most one chunk's float32 [chunk_size, V] copy at a time. (Autograd keeps what each
    chunk's logsumexp needs for backward; with float32 logits that is a view, no copy.)

    Args:
        logits: [B, T, V] unnormalised scores, any float dtype.
        tokens: [B, T] integer token ids in [0, V).
        chunk_size: positions per chunk, >= 1.

    Returns:
        [B, T] float32 log-probabilities (nats), differentiable w.r.t. logits.
    """
    if not isinstance(logits, Tensor) or logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError("logits must be a float tensor [B, T, V]")
    if not isinstance(tokens, Tensor) or tokens.shape != logits.shape[:2]:
        raise ValueError(
            f"tokens must be a tensor of shape {tuple(logits.shape[:2])} (logits' [B, T]), got "
            f"{tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__}"
        )
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must hold integer ids, got dtype {tokens.dtype}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
    vocab = logits.shape[-1]
    flat_logits = logits.reshape(-1, vocab)
    flat_tokens = tokens.reshape(-1, 1).long()
    pieces = []
    for start in range(0, flat_logits.shape[0], chunk_size):
        chunk = flat_logits[start : start + chunk_size].float()
        picked = chunk.gather(1, flat_tokens[start : start + chunk_size]).squeeze(1)
        pieces.append(picked - torch.logsumexp(chunk, dim=1))
    if not pieces:
        return logits.new_zeros(tokens.shape, dtype=torch.float32)
    return torch.cat(pieces).view(tokens.shape)


def _masked_row_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of values [B, T] over the True positions of bool mask [B, T] per row; 0 if none.

    Masked-out entries are replaced (torch.where), not multiplied by 0, so a non-finite value
    at a padding position neither leaks into the result nor into the gradient.
    """
    total = torch.where(mask, values, torch.zeros_like(values)).sum(dim=-1)
    return total / mask.sum(dim=-1).clamp(min=1).to(values.dtype)


def sequence_mean_logp(token_logp: Tensor, mask: Tensor) -> Tensor:
    """Length-normalised log-likelihood l(q, o) = (1/|o|) sum_t log pi(o_t | q, o_<t).

    docs/algorithms.md §2 (AMIR-GRPO's l) and §3 (LENS: pbar = exp(l)).

    Args:
        token_logp: [B, T] per-token log-probabilities (nats), e.g. from token_logprobs.
        mask: [B, T] bool or 0/1, True on completion tokens (never prompt or padding).

    Returns:
        [B] mean log-prob per completion token (nats per token), differentiable. A completion
        with zero tokens gives 0 (not NaN).
    """
    if not isinstance(token_logp, Tensor) or token_logp.dim() != 2:
        raise ValueError("token_logp must be a tensor [B, T]")
    if not isinstance(mask, Tensor) or mask.shape != token_logp.shape:
        raise ValueError(
            f"mask must be a tensor of token_logp's shape {tuple(token_logp.shape)}, got "
            f"{tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__}"
        )
    return _masked_row_mean(token_logp, _as_bool(mask, "mask"))
