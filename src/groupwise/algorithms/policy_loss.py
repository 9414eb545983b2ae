"""The policy-gradient loss of GRPO (clipped surrogate, or CISPO, GMPO, SAPO by name) and its KL
penalty (docs/algorithms.md §1 and "Policy losses: CISPO, GMPO, SAPO")."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from groupwise.algorithms.advantages import _as_bool, _check_choice
from groupwise.algorithms.logprobs import _masked_row_mean
from groupwise.algorithms.surrogates import SurrogateParams, get_policy_loss

RATIO_LEVELS = ("token", "sequence")
AGGREGATIONS = ("grpo", "dapo", "dr_grpo")


def _check_eps(value: float, name: str, upper: float | None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    if upper is not None and not value < upper:
        raise ValueError(f"{name} must be < {upper}, got {value!r}")


def _check_mask(mask: Tensor, shape: tuple[int, ...]) -> Tensor:
    if not isinstance(mask, Tensor) or tuple(mask.shape) != shape:
        raise ValueError(f"mask must be a tensor of shape {shape} (bool or 0/1)")
    return _as_bool(mask, "mask")


def aggregate_token_losses(
    per_token: Tensor,
    mask: Tensor,
    aggregation: str = "grpo",
    max_completion_length: int | None = None,
) -> Tensor:
    """Reduce per-token losses [B, T] over the completion tokens to a scalar
    (docs/algorithms.md §1).

    - "grpo": mean over the tokens of each completion, then mean over the B completions
      (a completion with no tokens counts as 0 in that mean; the paper's Eq. 1);
    - "dapo": sum over all tokens / number of tokens in the batch;
    - "dr_grpo": sum over all tokens / (B * max_completion_length); max_completion_length
      None means T (the padded length). Ignored by the other aggregations.

    policy_loss uses it; the trainer uses it too for gamma * kl_k3 so both terms are reduced
    the same way. Masked-out positions are selected away (torch.where), never multiplied.

    Args:
        per_token: [B, T] losses.
        mask: [B, T] bool or 0/1, True on completion tokens.
        aggregation: "grpo" | "dapo" | "dr_grpo".
        max_completion_length: int >= 1 or None.

    Returns:
        scalar, differentiable w.r.t. per_token.
    """
    _check_choice(aggregation, "aggregation", AGGREGATIONS)
    if not isinstance(per_token, Tensor) or per_token.dim() != 2:
        raise ValueError("per_token must be a tensor [B, T]")
    mask = _check_mask(mask, tuple(per_token.shape))
    if max_completion_length is not None and (
        isinstance(max_completion_length, bool)
        or not isinstance(max_completion_length, int)
        or max_completion_length < 1
    ):
        raise ValueError(
            f"max_completion_length must be None or an int >= 1, got {max_completion_length!r}"
        )
    if aggregation == "grpo":
        return _masked_row_mean(per_token, mask).mean()
    total = torch.where(mask, per_token, torch.zeros_like(per_token)).sum()
    if aggregation == "dapo":
        return total / mask.sum().clamp(min=1).to(per_token.dtype)
    batch, length = per_token.shape
    if max_completion_length is not None:
        length = max_completion_length
    return total / (batch * length)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ratio_level: str = "token",
    aggregation: str = "grpo",
    max_completion_length: int | None = None,
    token_weights: Tensor | None = None,
    surrogate: str = "clip",
    params: SurrogateParams | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped surrogate loss L = -min(rho A, clip(rho, 1-eps_low, 1+eps_high) A), aggregated;
    or another registered policy loss (`surrogate`: "cispo" | "gmpo" | "sapo").

    docs/algorithms.md §1 and "Policy losses: CISPO, GMPO, SAPO". KL is not included: add
    gamma * kl_k3 aggregated the same way.

    Importance ratio, at ratio_level:
    - "token": rho_{i,t} = exp(logp_{i,t} - old_{i,t});
    - "sequence" (GSPO): rho_i = exp(mean_t over completion tokens of (logp - old)),
      gradient through the mean, the same rho_i for every token of completion i.
    old_logp=None means on-policy (num_iterations = 1): old = logp.detach(), rho = 1 with the
    gradient of rho, so no extra forward pass is needed. old_logp is always a constant.

    Aggregation over the completion tokens as aggregate_token_losses: "grpo" (per-completion
    token mean, then mean over completions), "dapo" (token mean over the batch), "dr_grpo"
    (token sum / (B * max_completion_length), which defaults to T).

    So on-policy, unclipped, with "grpo": d loss / d logp_{i,t} = -A_i / (|o_i| * B).

    Args:
        logp: [B, T] token log-probs under the current policy (nats), with gradient.
        old_logp: [B, T] token log-probs under the rollout policy, or None (on-policy).
        advantages: [B], one per completion.
        mask: [B, T] bool or 0/1, True on completion tokens.
        eps_low, eps_high: clip range; 0 <= eps_low < 1, eps_high >= 0.
        ratio_level: "token" | "sequence", where the importance ratio is taken.
        aggregation: "grpo" | "dapo" | "dr_grpo".
        max_completion_length: denominator length of "dr_grpo", int >= 1 or None.
        token_weights: [B, T] constants multiplying each token's surrogate before aggregation
            (the truncated importance weights of groupwise.algorithms.importance, the
            high-entropy token mask), or None. Under "gmpo" a completion's weights enter by their
            geometric mean (its loss is one number per completion, as verl does).
        surrogate: the policy loss by name (groupwise.algorithms.surrogates.POLICY_LOSSES).
        params: the policy losses' options (SurrogateParams); None: the defaults. Its eps_low
            and eps_high are replaced by the arguments eps_low and eps_high.

    Returns:
        (loss, metrics): a scalar loss, and detached scalar metrics, fractions over the
        masked tokens of the batch, as TRL's GRPOTrainer defines them:
        "clip_fraction_low": rho < 1 - eps_low and A < 0 (clipped from below and active);
        "clip_fraction_high": rho > 1 + eps_high and A > 0;
        "clip_fraction": either of the two;
        "ratio_mean": mean of rho over masked tokens.
        Under the other losses "low" / "high" are where their own clip bound was active
        (CISPO: the IS weight clipped whatever A's sign; SAPO: never).
        At ratio_level "sequence" every token carries its completion's rho, so these are
        token-weighted fractions (TRL averages over completions there instead).
    """
    _check_choice(ratio_level, "ratio_level", RATIO_LEVELS)
    _check_choice(aggregation, "aggregation", AGGREGATIONS)
    _check_eps(eps_low, "eps_low", upper=1.0)
    _check_eps(eps_high, "eps_high", upper=None)
    loss_fn = get_policy_loss(surrogate)
    if ratio_level == "sequence" and not loss_fn.sequence_ratio:
        raise ValueError(f"the {surrogate} policy loss takes token-level ratios, not 'sequence'")
    shape = _check_shapes(logp, old_logp, advantages)
    mask = _check_mask(mask, shape)
    old = logp.detach() if old_logp is None else old_logp.detach().to(logp.dtype)
    # Masked positions get log-ratio 0 before exp, so padding can never overflow into NaN.
    log_ratio = torch.where(mask, logp - old, torch.zeros_like(logp))
    if ratio_level == "sequence":
        log_ratio = _masked_row_mean(log_ratio, mask).unsqueeze(1).expand_as(logp)
    adv = advantages.detach().to(logp.dtype).unsqueeze(1)
    params = replace(params or SurrogateParams(), eps_low=eps_low, eps_high=eps_high)
    out = loss_fn.fn(logp, log_ratio, adv, mask, params)
    per_token = out.per_token
    if token_weights is not None:
        if not isinstance(token_weights, Tensor) or tuple(token_weights.shape) != shape:
            raise ValueError(f"token_weights must be None or a tensor of logp's shape {shape}")
        weights = token_weights.detach().to(per_token.dtype)
        if surrogate == "gmpo":  # one loss per completion: its weights' geometric mean
            weights = _geometric_row_mean(weights, mask).unsqueeze(1).expand_as(per_token)
        per_token = per_token * weights

    loss = aggregate_token_losses(per_token, mask, aggregation, max_completion_length)

    with torch.no_grad():
        tokens = mask.sum().clamp(min=1).to(logp.dtype)
        ratio = torch.exp(log_ratio)
        metrics = {
            "clip_fraction_low": out.low.sum().to(logp.dtype) / tokens,
            "clip_fraction_high": out.high.sum().to(logp.dtype) / tokens,
            "clip_fraction": (out.low | out.high).sum().to(logp.dtype) / tokens,
            "ratio_mean": torch.where(mask, ratio, torch.zeros_like(ratio)).sum() / tokens,
        }
    return loss, metrics


def _check_shapes(logp: Tensor, old_logp: Tensor | None, advantages: Tensor) -> tuple[int, ...]:
    """logp [B, T] float, old_logp None or [B, T], advantages [B]; returns (B, T)."""
    if not isinstance(logp, Tensor) or logp.dim() != 2 or not logp.is_floating_point():
        raise ValueError("logp must be a float tensor [B, T]")
    shape = tuple(logp.shape)
    if old_logp is not None and (
        not isinstance(old_logp, Tensor) or tuple(old_logp.shape) != shape
    ):
        raise ValueError(f"old_logp must be None or a tensor of logp's shape {shape}")
    if not isinstance(advantages, Tensor) or tuple(advantages.shape) != shape[:1]:
        raise ValueError(f"advantages must be a tensor of shape ({shape[0]},), one per row")
    return shape


def _geometric_row_mean(weights: Tensor, mask: Tensor) -> Tensor:
    """[B] exp of the masked row mean of log(weights [B, T]); a zero weight gives 0."""
    logs = torch.log(torch.where(mask, weights, torch.ones_like(weights)))
    return torch.exp(_masked_row_mean(logs, mask))


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token (docs/algorithms.md §1).

        KL_{i,t} = exp(ref - logp) - (ref - logp) - 1      >= 0, = 0 where ref == logp

    Args:
        logp: [B, T] token log-probs under the policy (nats), with gradient.
        ref_logp: [B, T] token log-probs under the reference policy; a constant (detached).

    Returns:
        [B, T] per-token KL estimate (nats). Values at padding positions are meaningless:
        select completion tokens with torch.where (or policy_loss-style aggregation), do not
        multiply by the mask, in case a padding value is not finite.
    """
    if not isinstance(logp, Tensor) or not isinstance(ref_logp, Tensor):
        raise TypeError("logp and ref_logp must be tensors")
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"ref_logp has shape {tuple(ref_logp.shape)}, logp {tuple(logp.shape)}: they must match"
        )
    delta = ref_logp.detach().to(logp.dtype) - logp
    return torch.exp(delta) - delta - 1.0
