"""Pure tensor math of GRPO, AMIR-GRPO and LENS (REFERENCE.md sections 1-3); imports only torch.

Batches are group-major: the G completions of question g are rows g*G .. g*G+G-1.
"""

from groupwise.algorithms.advantages import (
    group_advantages,
    group_types,
    lens_advantages,
    lens_advantages_from_rewards,
    lens_rewards,
)
from groupwise.algorithms.logprobs import sequence_mean_logp, token_logprobs
from groupwise.algorithms.policy_loss import aggregate_token_losses, kl_k3, policy_loss
from groupwise.algorithms.preference import AdaptiveLambda, mine_pairs, preference_loss

__all__ = [
    "AdaptiveLambda",
    "aggregate_token_losses",
    "group_advantages",
    "group_types",
    "kl_k3",
    "lens_advantages",
    "lens_advantages_from_rewards",
    "lens_rewards",
    "mine_pairs",
    "policy_loss",
    "preference_loss",
    "sequence_mean_logp",
    "token_logprobs",
]
