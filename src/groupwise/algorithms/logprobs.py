"""Per-token log-probabilities from logits (and, when asked, the per-token entropy of the
full-vocabulary distribution), and their length-normalised mean.

docs/algorithms.md §1 (logp_theta of the importance ratio), §2 (the length-normalised
log-likelihood l(q, o) of AMIR-GRPO; LENS's pbar = exp of it, §3) and "Entropy controls".
"""

from __future__ import annotations

import torch
from torch import Tensor

from groupwise.algorithms.advantages import _as_bool


def token_logprobs(
    logits: Tensor, tokens: Tensor, chunk_size: int = 128, temperature: float = 1.0
) -> Tensor:
    """log softmax(logits / temperature)[token] for every position, without a full-vocabulary
    float32 copy in the forward pass and with one full-size buffer (the gradient) in the
    backward pass.

    logits[b, t] must already be the scores that predict tokens[b, t] (the caller shifts the
    causal-LM output by one).

    The [B*T] positions are processed in chunks of `chunk_size` rows: each chunk is cast to
    float32 and divided by the temperature, its logsumexp taken, and the token's logit
    gathered, so the forward pass holds at most one chunk's float32 [chunk_size, V] copy at a
    time and keeps only the logits (a reference, no copy) and the logsumexp per position for
    backward. The backward pass writes d/dlogits = (onehot(token) - softmax) * grad / temperature
    chunk by chunk into the one gradient tensor (docs/algorithms.md §1).

    Args:
        logits: [B, T, V] unnormalised scores, any float dtype.
        tokens: [B, T] integer token ids in [0, V).
        chunk_size: positions per chunk, >= 1.
        temperature: > 0, the sampling temperature the log-probs are taken at.

    Returns:
        [B, T] float32 log-probabilities (nats), differentiable w.r.t. logits (once).
    """
    _check_arguments(logits, tokens, chunk_size, temperature)
    if tokens.numel() == 0:
        return logits.new_zeros(tokens.shape, dtype=torch.float32)
    return _TokenLogprobs.apply(logits, tokens, chunk_size, 1.0 / temperature)


def _check_arguments(logits: Tensor, tokens: Tensor, chunk_size: int, temperature: float) -> None:
    """token_logprobs' arguments: ValueError naming the first one that is wrong."""
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
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


class _TokenLogprobs(torch.autograd.Function):
    """token_logprobs' forward and backward, chunked over positions.

    Autograd of the plain expression (gather minus logsumexp, per chunk) would keep a zero-filled
    full-size gradient per chunk (slice and gather backward) and sum them: on a 2048 x 49,152
    logit block that is 1.6 GB of fills and as many additions for every backward pass.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, tokens: Tensor, chunk_size: int, scale: float) -> Tensor:
        flat_logits = logits.reshape(-1, logits.shape[-1])
        flat_tokens = tokens.reshape(-1, 1).long()
        lse = torch.empty(flat_logits.shape[0], dtype=torch.float32, device=logits.device)
        picked = torch.empty_like(lse)
        for start in range(0, flat_logits.shape[0], chunk_size):
            rows = slice(start, start + chunk_size)
            chunk = _scaled(flat_logits[rows], scale)
            lse[rows] = torch.logsumexp(chunk, dim=1)
            picked[rows] = chunk.gather(1, flat_tokens[rows]).squeeze(1)
        ctx.save_for_backward(logits, flat_tokens, lse)
        ctx.chunk_size, ctx.scale = chunk_size, scale
        return (picked - lse).view(tokens.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, flat_tokens, lse = ctx.saved_tensors
        flat_logits = logits.reshape(-1, logits.shape[-1])
        flat_grad = grad_out.reshape(-1, 1).float()
        grad = torch.empty_like(flat_logits)
        for start in range(0, flat_logits.shape[0], ctx.chunk_size):
            rows = slice(start, start + ctx.chunk_size)
            # softmax * (-g) + onehot * g, then the chain rule through the 1/temperature;
            # float32 chunks are written in place (a fresh buffer per chunk costs page faults)
            probs = grad[rows] if grad.dtype == torch.float32 else None
            probs = torch.sub(_scaled(flat_logits[rows], ctx.scale), lse[rows, None], out=probs)
            probs.exp_().mul_(flat_grad[rows].neg())
            probs.scatter_add_(1, flat_tokens[rows], flat_grad[rows])
            if ctx.scale != 1.0:
                probs.mul_(ctx.scale)
            if probs.dtype != grad.dtype:
                grad[rows] = probs
        return grad.view_as(logits), None, None, None


def token_logprobs_and_entropy(
    logits: Tensor, tokens: Tensor, chunk_size: int = 128, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:
    """token_logprobs, and the entropy H = -sum_v p_v log p_v of softmax(logits / temperature)
    at every position (docs/algorithms.md, "Entropy controls"), in the same chunked pass: one
    float32 [chunk_size, V] copy at a time forward, one full-size gradient buffer backward.

    Args: as token_logprobs.

    Returns:
        ([B, T] float32 log-probs, [B, T] float32 entropies in nats), both differentiable
        w.r.t. logits (once): dH/dz_v = -p_v (log p_v + H) / temperature.
    """
    _check_arguments(logits, tokens, chunk_size, temperature)
    if tokens.numel() == 0:
        empty = logits.new_zeros(tokens.shape, dtype=torch.float32)
        return empty, empty.clone()
    return _TokenLogprobsEntropy.apply(logits, tokens, chunk_size, 1.0 / temperature)


class _TokenLogprobsEntropy(torch.autograd.Function):
    """token_logprobs_and_entropy's forward and backward, chunked over positions (as
    _TokenLogprobs: no zero-filled full-size gradient per chunk)."""

    @staticmethod
    def forward(ctx, logits: Tensor, tokens: Tensor, chunk_size: int, scale: float):
        flat_logits = logits.reshape(-1, logits.shape[-1])
        flat_tokens = tokens.reshape(-1, 1).long()
        lse = torch.empty(flat_logits.shape[0], dtype=torch.float32, device=logits.device)
        picked, entropy = torch.empty_like(lse), torch.empty_like(lse)
        for start in range(0, flat_logits.shape[0], chunk_size):
            rows = slice(start, start + chunk_size)
            chunk = _scaled(flat_logits[rows], scale)
            lse[rows] = torch.logsumexp(chunk, dim=1)
            picked[rows] = chunk.gather(1, flat_tokens[rows]).squeeze(1)
            # H = lse - sum_v p_v z_v (z: the scaled logits), as verl's entropy_from_logits
            entropy[rows] = lse[rows] - (torch.softmax(chunk, dim=1) * chunk).sum(dim=1)
        ctx.save_for_backward(logits, flat_tokens, lse, entropy)
        ctx.chunk_size, ctx.scale = chunk_size, scale
        return (picked - lse).view(tokens.shape), entropy.view(tokens.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp: Tensor | None, grad_entropy: Tensor | None):
        logits, flat_tokens, lse, entropy = ctx.saved_tensors
        flat_logits = logits.reshape(-1, logits.shape[-1])
        rows_total = flat_logits.shape[0]
        g_logp = _flat_grad(grad_logp, rows_total, lse)
        g_ent = _flat_grad(grad_entropy, rows_total, lse)
        grad = torch.empty_like(flat_logits)
        for start in range(0, rows_total, ctx.chunk_size):
            rows = slice(start, start + ctx.chunk_size)
            log_p = _scaled(flat_logits[rows], ctx.scale) - lse[rows, None]
            probs = log_p.exp()
            # d logp_token / dz = onehot - p;  dH / dz = -p (log p + H)
            chunk = -probs * (g_logp[rows] + g_ent[rows] * (log_p + entropy[rows, None]))
            chunk.scatter_add_(1, flat_tokens[rows], g_logp[rows])
            grad[rows] = chunk * ctx.scale if ctx.scale != 1.0 else chunk
        return grad.view_as(logits), None, None, None


def _flat_grad(grad: Tensor | None, rows: int, like: Tensor) -> Tensor:
    """An output's incoming gradient as float32 [rows, 1]; zeros when it has none."""
    if grad is None:
        return torch.zeros(rows, 1, dtype=torch.float32, device=like.device)
    return grad.reshape(-1, 1).float()


def _scaled(chunk: Tensor, scale: float) -> Tensor:
    """A chunk of logits as float32 times scale (a view when both are no-ops)."""
    chunk = chunk.float()
    return chunk * scale if scale != 1.0 else chunk


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
