"""The per-token policy losses by name: GRPO's clipped surrogate, CISPO, GMPO and SAPO
(docs/algorithms.md §1 and "Policy losses: CISPO, GMPO, SAPO").

Each takes the log importance ratio (token or sequence level, already computed by policy_loss)
and returns per-token losses [B, T] that `aggregate_token_losses` reduces, plus where its clip
was active. `policy_loss` looks the configured one up (`get_policy_loss`); register more with
`@register_policy_loss("name")`, as verl's `register_policy_loss`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SurrogateParams:
    """The options of the policy losses (the config's `algorithm.*` of the same names).

    eps_low, eps_high: GRPO's clip range of the ratio, rho in [1 - eps_low, 1 + eps_high].
    cispo_eps_low, cispo_eps_high: CISPO's IS-weight clip [1 - low, 1 + high]; low None: no
        lower bound (MiniMax-M1's setting).
    gmpo_eps_low, gmpo_eps_high: GMPO's clip of the log ratio to [-low, high].
    sapo_tau_pos, sapo_tau_neg: SAPO's gate temperatures for A > 0 and A <= 0.
    """

    eps_low: float = 0.2
    eps_high: float = 0.2
    cispo_eps_low: float | None = None
    cispo_eps_high: float = 4.0
    gmpo_eps_low: float = 0.4
    gmpo_eps_high: float = 0.4
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05


@dataclass(frozen=True)
class Surrogate:
    """per_token: [B, T] losses (values at padding meaningless: aggregation selects them
    away). low, high: [B, T] bool, where the loss's clip bound below / above was active."""

    per_token: Tensor
    low: Tensor
    high: Tensor


SurrogateFn = Callable[[Tensor, Tensor, Tensor, Tensor, SurrogateParams], Surrogate]
"""(logp [B, T] with gradient, log_ratio [B, T] with gradient, advantages [B, 1] constant,
mask [B, T] bool, params) -> Surrogate."""


@dataclass(frozen=True)
class PolicyLoss:
    """A named policy loss. sequence_ratio: it accepts a sequence-level ratio (GSPO's)."""

    name: str
    fn: SurrogateFn
    sequence_ratio: bool = True


POLICY_LOSSES: dict[str, PolicyLoss] = {}


def register_policy_loss(
    name: str, *, sequence_ratio: bool = True
) -> Callable[[SurrogateFn], SurrogateFn]:
    """Decorator adding `fn` (SurrogateFn) as the policy loss `name`."""

    def decorator(fn: SurrogateFn) -> SurrogateFn:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is already registered")
        POLICY_LOSSES[name] = PolicyLoss(name, fn, sequence_ratio)
        return fn

    return decorator


def get_policy_loss(name: str) -> PolicyLoss:
    """The registered policy loss `name`; an unknown name is an error naming the closest one."""
    if name not in POLICY_LOSSES:
        close = difflib.get_close_matches(name, POLICY_LOSSES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        known = ", ".join(sorted(POLICY_LOSSES))
        raise ValueError(f"unknown policy loss {name!r}{hint}; registered: {known}")
    return POLICY_LOSSES[name]


@register_policy_loss("clip")
def clipped_surrogate(
    logp: Tensor, log_ratio: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams
) -> Surrogate:
    """GRPO/PPO: -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) (docs/algorithms.md §1)."""
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1.0 - p.eps_low, 1.0 + p.eps_high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    low = (ratio < 1.0 - p.eps_low) & (adv < 0) & mask
    high = (ratio > 1.0 + p.eps_high) & (adv > 0) & mask
    return Surrogate(per_token, low, high)


@register_policy_loss("cispo", sequence_ratio=False)
def cispo_surrogate(
    logp: Tensor, log_ratio: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams
) -> Surrogate:
    """CISPO: -sg(clip(rho, 1 - eps_low^IS, 1 + eps_high^IS)) A log pi_theta (docs/algorithms.md,
    "CISPO"). The clipped weight is a constant, so every token keeps a gradient (A times the
    weight) however far its ratio moved; a clip bound is "active" wherever it changed rho."""
    ratio = torch.exp(log_ratio.detach())
    low_bound = None if p.cispo_eps_low is None else 1.0 - p.cispo_eps_low
    weight = ratio.clamp(min=low_bound, max=1.0 + p.cispo_eps_high)
    per_token = -weight * adv * logp
    low = (ratio < low_bound) & mask if low_bound is not None else torch.zeros_like(mask)
    return Surrogate(per_token, low, (ratio > 1.0 + p.cispo_eps_high) & mask)


@register_policy_loss("gmpo", sequence_ratio=False)
def gmpo_surrogate(
    logp: Tensor, log_ratio: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams
) -> Surrogate:
    """GMPO: -A exp((1/|o|) sum_t sgn(A) min(sgn(A) log rho_t, sgn(A) clip(log rho_t, -eps_low,
    eps_high))), the geometric mean of the token ratios, each clipped in log space
    (docs/algorithms.md, "GMPO"). The completion's loss is given to each of its tokens, so
    aggregation "grpo" (per-completion mean, then mean) gives the paper's (1/G) sum_i."""
    sign = torch.sign(adv)
    clamped = log_ratio.clamp(-p.gmpo_eps_low, p.gmpo_eps_high)
    kept = sign * torch.minimum(sign * log_ratio, sign * clamped)
    kept = torch.where(mask, kept, torch.zeros_like(kept))
    mean_log = kept.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)
    per_token = (-adv * torch.exp(mean_log)).expand_as(logp)
    low = (log_ratio < -p.gmpo_eps_low) & (adv < 0) & mask
    high = (log_ratio > p.gmpo_eps_high) & (adv > 0) & mask
    return Surrogate(per_token, low, high)


@register_policy_loss("sapo")
def sapo_surrogate(
    logp: Tensor, log_ratio: Tensor, adv: Tensor, mask: Tensor, p: SurrogateParams
) -> Surrogate:
    """SAPO: -f(rho) A with the soft gate f(rho) = sigmoid(tau (rho - 1)) 4 / tau, tau =
    tau_pos where A > 0 else tau_neg (docs/algorithms.md, "SAPO"). No hard clip: the gate's
    slope 4 sigma (1 - sigma) rho is 1 at rho = 1 and fades smoothly away from it."""
    ratio = torch.exp(log_ratio)
    # the temperatures in the ratio's dtype (python floats in torch.where would give float32)
    pos, neg = (torch.tensor(t, dtype=ratio.dtype) for t in (p.sapo_tau_pos, p.sapo_tau_neg))
    tau = torch.where(adv > 0, pos, neg)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
    none = torch.zeros_like(mask)
    return Surrogate(-gate * adv, none, none)
