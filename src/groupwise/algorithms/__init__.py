"""Every algorithm decision of GRPO, AMIR-GRPO and LENS, as pure tensor math
(docs/algorithms.md §1-3), with the policy losses CISPO, GMPO and SAPO and the entropy controls
(docs/algorithms.md, "Policy losses: CISPO, GMPO, SAPO" and "Entropy controls").

Imports only torch. Batches are group-major: the G completions of question g are rows
g*G .. g*G+G-1. What an engine calls (docs/design.md, "One algorithm core, several engines"):

- at advantage time, where whole groups are visible: an advantage estimator by name
  (`get_advantage_estimator`: "grpo", "lens", "rloo", "reinforce_plus_plus_baseline"), AMIR's
  pairs (`mine_pairs`) and per-completion coefficients (`preference_coefficients`);
- at loss time, per row: `loss_terms` (the policy loss by name, `get_policy_loss`: "clip",
  "cispo", "gmpo", "sapo"; KL; the entropy bonus; the AMIR term), weighted by
  `micro_batch_share`; the per-token entropies from `token_logprobs_and_entropy` when an
  entropy option is on;
- once per loss computation: `AdaptiveLambda`; once per update: `AdaptiveEntropy`;
- DAPO's decisions (docs/algorithms.md, "Dynamic sampling", "Overlong completions"): which
  groups dynamic sampling keeps (`kept_groups`), the soft overlong punishment
  (`soft_overlong_punishment`) and the AMIR pairs without masked rows (`pairs_without`).

`group_targets` (targets.py) is the advantage-time sequence in one call: estimator -> pairs on
its reward totals -> coefficients. `AlgorithmOptions` (options.py) declares the options every
engine shares, with defaults, ranges and documentation; every engine calls its `build` once,
which runs every check of the options against the engine and returns the `Algorithm` to run.
"""

from groupwise.algorithms.advantages import (
    group_advantages,
    group_types,
    lens_advantages,
    lens_advantages_from_rewards,
    lens_calibrated_total,
    lens_rewards,
)
from groupwise.algorithms.entropy import AdaptiveEntropy, high_entropy_mask
from groupwise.algorithms.estimators import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    Advantages,
    AdvantageSettings,
    GroupRewards,
    get_advantage_estimator,
    register_advantage_estimator,
)
from groupwise.algorithms.group_filter import FILTER_METRICS, constant_groups, kept_groups
from groupwise.algorithms.importance import (
    IMPORTANCE_MODES,
    ImportanceCorrection,
    importance_weights,
    mismatch_metrics,
    mismatch_sums,
)
from groupwise.algorithms.logprobs import (
    sequence_mean_logp,
    token_logprobs,
    token_logprobs_and_entropy,
)
from groupwise.algorithms.objective import LossSettings, LossTerms, loss_terms, micro_batch_share
from groupwise.algorithms.options import (
    Algorithm,
    AlgorithmOptions,
    RewardFacts,
)
from groupwise.algorithms.overlong import pairs_without, soft_overlong_punishment
from groupwise.algorithms.policy_loss import aggregate_token_losses, kl_k3, policy_loss
from groupwise.algorithms.preference import (
    AdaptiveLambda,
    PreferenceTerms,
    mine_pairs,
    preference_coefficients,
    preference_loss,
    preference_surrogate,
)
from groupwise.algorithms.surrogates import (
    POLICY_LOSSES,
    SurrogateParams,
    get_policy_loss,
    register_policy_loss,
)
from groupwise.algorithms.targets import (
    GroupTargets,
    PairlessWarning,
    PairSettings,
    group_targets,
    largest_reward_gap,
    unreachable_margin,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "FILTER_METRICS",
    "IMPORTANCE_MODES",
    "POLICY_LOSSES",
    "AdaptiveEntropy",
    "AdaptiveLambda",
    "AdvantageEstimator",
    "AdvantageSettings",
    "Advantages",
    "Algorithm",
    "AlgorithmOptions",
    "GroupRewards",
    "GroupTargets",
    "ImportanceCorrection",
    "LossSettings",
    "LossTerms",
    "PairSettings",
    "PairlessWarning",
    "PreferenceTerms",
    "RewardFacts",
    "SurrogateParams",
    "aggregate_token_losses",
    "constant_groups",
    "get_advantage_estimator",
    "get_policy_loss",
    "group_advantages",
    "group_targets",
    "group_types",
    "high_entropy_mask",
    "importance_weights",
    "kept_groups",
    "kl_k3",
    "largest_reward_gap",
    "lens_advantages",
    "lens_advantages_from_rewards",
    "lens_calibrated_total",
    "lens_rewards",
    "loss_terms",
    "micro_batch_share",
    "mine_pairs",
    "mismatch_metrics",
    "mismatch_sums",
    "pairs_without",
    "policy_loss",
    "preference_coefficients",
    "preference_loss",
    "preference_surrogate",
    "register_advantage_estimator",
    "register_policy_loss",
    "sequence_mean_logp",
    "soft_overlong_punishment",
    "token_logprobs",
    "token_logprobs_and_entropy",
    "unreachable_margin",
]
