"""The loss terms of one micro-batch: the policy loss (clipped surrogate, CISPO, GMPO or SAPO),
KL, the entropy bonus and the AMIR preference term.

docs/algorithms.md §1 (surrogate, KL, aggregation), "Policy losses: CISPO, GMPO, SAPO",
"Entropy controls" and §2 (the preference term, in the per-completion form of
preference_coefficients). An engine weights and sums them:

    loss = share * (terms.policy + kl_coef * terms.kl - entropy_coef * terms.entropy)
           + lambda_reg * terms.preference

where `share` (micro_batch_share) is the micro-batch's part of the batch-level mean, so that
gradients accumulated over micro-batches (and summed over processes) are those of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from groupwise.algorithms.advantages import _check_choice
from groupwise.algorithms.entropy import high_entropy_mask
from groupwise.algorithms.logprobs import sequence_mean_logp
from groupwise.algorithms.policy_loss import (
    AGGREGATIONS,
    aggregate_token_losses,
    kl_k3,
    policy_loss,
)
from groupwise.algorithms.preference import preference_surrogate
from groupwise.algorithms.surrogates import SurrogateParams


@dataclass(frozen=True)
class LossSettings:
    """eps_low, eps_high: clip range. ratio_level: "token" | "sequence" (GSPO). aggregation:
    "grpo" | "dapo" | "dr_grpo". max_completion_length: dr_grpo's denominator length (tokens).
    kl_coef: gamma >= 0; with 0 no KL term is computed. policy_loss: "clip" | "cispo" | "gmpo" |
    "sapo" (groupwise.algorithms.surrogates), with its options in `surrogate` (whose eps_low and
    eps_high are replaced by the fields above). top_entropy_quantile: rho in [0, 1], the policy
    loss only on the top-rho tokens by entropy (1: every token). entropy_bonus: compute the
    aggregated entropy term (its coefficient is the engine's, fixed or adaptive)."""

    eps_low: float = 0.2
    eps_high: float = 0.2
    ratio_level: str = "token"
    aggregation: str = "grpo"
    max_completion_length: int | None = None
    kl_coef: float = 0.0
    policy_loss: str = "clip"
    surrogate: SurrogateParams = field(default_factory=SurrogateParams)
    top_entropy_quantile: float = 1.0
    entropy_bonus: bool = False

    @property
    def needs_entropy(self) -> bool:
        """Whether the loss reads the per-token entropies (an entropy option is on)."""
        return self.entropy_bonus or self.top_entropy_quantile < 1.0


@dataclass(frozen=True)
class LossTerms:
    """policy: scalar clipped surrogate over the micro-batch. kl: scalar aggregated k3 KL, or
    None when kl_coef = 0. preference: scalar sum_k c_k l_k(theta), or None without AMIR
    coefficients. clip: detached clip statistics of policy_loss, with "entropy" (the mean token
    entropy over the mask) when entropies were given. entropy: scalar aggregated entropy of the
    tokens the policy loss sees, with gradient, or None without the entropy bonus."""

    policy: Tensor
    kl: Tensor | None
    preference: Tensor | None
    clip: dict[str, Tensor]
    entropy: Tensor | None = None

    def grpo(self, kl_coef: float, entropy_coef: float = 0.0) -> Tensor:
        """L_GRPO of docs/algorithms.md §2: the surrogate plus gamma times the KL, minus the
        entropy bonus's coefficient times the entropy when there is one."""
        loss = self.policy if self.kl is None else self.policy + kl_coef * self.kl
        if self.entropy is not None and entropy_coef != 0.0:
            loss = loss - entropy_coef * self.entropy
        return loss


def loss_terms(
    logp: Tensor,
    mask: Tensor,
    advantages: Tensor,
    settings: LossSettings,
    old_logp: Tensor | None = None,
    ref_logp: Tensor | None = None,
    coefficients: Tensor | None = None,
    token_weights: Tensor | None = None,
    entropy: Tensor | None = None,
) -> LossTerms:
    """The terms of one micro-batch of whole rows.

    Args:
        logp: [b, T] token log-probs under the current policy (nats), with gradient.
        mask: [b, T] bool, True on completion tokens.
        advantages: [b], one per completion.
        settings: LossSettings.
        old_logp: [b, T] rollout-policy log-probs, or None while the policy is still the
            rollout policy (ratio 1 exactly, policy_loss).
        ref_logp: [b, T] reference log-probs; needed when settings.kl_coef > 0.
        coefficients: [b] AMIR's c_k of these rows (preference_coefficients), or None.
        token_weights: [b, T] weights of the surrogate's tokens (truncated importance
            weights against the sampler, groupwise.algorithms.importance), or None.
        entropy: [b, T] per-token entropies of the policy (nats, with gradient:
            token_logprobs_and_entropy); needed when settings.needs_entropy.

    Returns:
        LossTerms.
    """
    if settings.kl_coef > 0 and ref_logp is None:
        raise ValueError("kl_coef > 0 needs ref_logp")
    if settings.needs_entropy and entropy is None:
        raise ValueError("an entropy option (bonus or top_entropy_quantile < 1) needs entropy")
    policy_mask = mask.bool()
    if settings.top_entropy_quantile < 1.0:
        # as TRL: the other tokens' losses become 0 but still count in the aggregation's means
        policy_mask = high_entropy_mask(entropy, mask, settings.top_entropy_quantile)
        high = policy_mask.to(logp.dtype)
        token_weights = high if token_weights is None else token_weights * high
    policy, clip = policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        eps_low=settings.eps_low,
        eps_high=settings.eps_high,
        ratio_level=settings.ratio_level,
        aggregation=settings.aggregation,
        max_completion_length=settings.max_completion_length,
        token_weights=token_weights,
        surrogate=settings.policy_loss,
        params=settings.surrogate,
    )
    kl = None
    if settings.kl_coef > 0:
        kl = aggregate_token_losses(
            kl_k3(logp, ref_logp), mask, settings.aggregation, settings.max_completion_length
        )
    preference = None
    if coefficients is not None:
        preference = preference_surrogate(sequence_mean_logp(logp, mask), coefficients)
    bonus = None
    if entropy is not None:
        clip = {**clip, "entropy": _token_mean(entropy.detach(), mask.bool())}
        if settings.entropy_bonus:
            bonus = aggregate_token_losses(
                entropy, policy_mask, settings.aggregation, settings.max_completion_length
            )
    return LossTerms(policy, kl, preference, clip, bonus)


def _token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of values [b, T] over the True positions of mask [b, T] (0 when none)."""
    total = values.where(mask, torch.zeros_like(values)).sum()
    return total / mask.sum().clamp(min=1).to(values.dtype)


def micro_batch_share(
    aggregation: str, rows: int, tokens: int, batch_rows: int, batch_tokens: int
) -> float:
    """Weight of a micro-batch's aggregated loss in the loss of the whole batch.

    "grpo" and "dr_grpo" average over completions: rows / batch_rows; "dapo" averages over
    tokens: tokens / batch_tokens. Counts are of the whole batch the optimizer step is taken
    on (every process's rows), so micro-batch losses weighted by it sum to the batch's loss.
    """
    _check_choice(aggregation, "aggregation", AGGREGATIONS)
    if aggregation == "dapo":
        return tokens / max(batch_tokens, 1)
    return rows / batch_rows
