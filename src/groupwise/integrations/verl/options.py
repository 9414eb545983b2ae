"""groupwise's options inside verl: the mapping `algorithm.groupwise` of verl's Hydra config
(docs/guides/verl.md, "Options").

Every option of groupwise.algorithms.AlgorithmOptions under its own name (its default, range and
documentation are declared there once), except `advantage`: the estimator is verl's
`algorithm.adv_estimator=groupwise_<name>`. Plus what only verl's side needs (`VerlOptions`):
what the score means (its range, the correctness signal) and GRPO's std settings. Set them from
the command line with Hydra's `+` (the keys are new to verl's schema):

    algorithm.adv_estimator=groupwise_lens +algorithm.groupwise.lens_alpha=0.25

Each bad option is a one-line ValueError naming `algorithm.groupwise.<key>`. The policy losses
CISPO, GMPO and SAPO and the fixed entropy bonus are verl's own options, which verl's code runs
(VERL_OWN: a groupwise key for them is refused, naming verl's); the adaptive entropy coefficient
and the high-entropy token mask are not available in verl (refused the same way).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from groupwise.algorithms import Algorithm, AlgorithmOptions, RewardFacts
from groupwise.algorithms.options import option_fields
from groupwise.options import check_options, option

PREFIX = "algorithm.groupwise."
ESTIMATOR_PREFIX = "groupwise_"
"""verl's `algorithm.adv_estimator` name of groupwise's estimator NAME: groupwise_NAME."""


def verl_name(option_name: str) -> str:
    """The name a user types in verl's config for groupwise option `option_name`."""
    return PREFIX + option_name


@dataclass
class VerlOptions:
    """What groupwise needs to know of verl's reward and GRPO settings."""

    correctness_value: float = option(
        1.0,
        """What the score is for a correct answer when the score is the correctness itself
        (verl's GSM8K and MATH rewards: 1.0; 0 otherwise): LENS calibrates it, the groups/*
        metrics count it. docs/algorithms.md §3.""",
    )
    correctness_key: str | None = option(
        None,
        """The key of the reward's extra info (reward_extra_info, as verl's MATH reward's `acc`)
        that holds each response's correctness (true or > 0: correct), for a score that is not
        the correctness itself (null: the score is, see correctness_value). Read by the trainer
        mode (trainer.v1.trainer_mode=groupwise). docs/algorithms.md §3.""",
    )
    reward_min: float | None = option(
        None,
        """The score's lowest value, with reward_max: AMIR's margin is refused when no two
        scores can differ by more (null: unknown, then a warning comes once).
        docs/algorithms.md §2.""",
    )
    reward_max: float | None = option(None, "The score's highest value (see reward_min).")
    scale: Literal["verl", "group", "batch", "none"] = option(
        "verl",
        """GRPO's std (docs/algorithms.md §1): group | batch | none (Dr.GRPO) | verl: from
        verl's algorithm.norm_adv_by_std_in_grpo (true: group, false: none).""",
    )
    std: Literal["unbiased", "population"] = option(
        "unbiased", "The std of GRPO's scale: unbiased (verl's torch.std) | population."
    )
    eps: float = option(
        1e-6,
        "Added to the std (verl's grpo: 1e-6). docs/algorithms.md §1.",
        gt=0,
    )
    mask_truncated: bool = option(
        False,
        """DAPO's overlong filtering (TRL's mask_truncated_completions): responses that fill
        actor_rollout_ref.rollout.response_length leave the loss (their response_mask is
        zeroed, so verl's loss aggregation counts none of their tokens) and form no AMIR pair;
        they still count in their group's statistics. Only in groupwise's trainer mode
        (trainer.v1.trainer_mode=groupwise): verl's own trainers give an estimator no way to
        change the mask. docs/algorithms.md, "Overlong completions".""",
    )


def _fields(kind: type) -> set[str]:
    return {spec.name for spec in dataclasses.fields(kind)}


ACTOR = "actor_rollout_ref.actor."
VERL_OWN = {
    "policy_loss": f"verl's own {ACTOR}policy_loss.loss_mode=cispo | geo_mean (GMPO) | sapo",
    "cispo_eps_low": f"verl's CISPO clips to [1 - {ACTOR}clip_ratio_low, 1 + clip_ratio_high]",
    "cispo_eps_high": f"verl's CISPO clips to [1 - {ACTOR}clip_ratio_low, 1 + clip_ratio_high]",
    "gmpo_eps_low": f"verl's geo_mean clips log rho to [-{ACTOR}clip_ratio_low, clip_ratio_high]",
    "gmpo_eps_high": f"verl's geo_mean clips log rho to [-{ACTOR}clip_ratio_low, clip_ratio_high]",
    "sapo_tau_pos": f"verl's own {ACTOR}tau_pos",
    "sapo_tau_neg": f"verl's own {ACTOR}tau_neg",
    "entropy_coef": f"verl's own {ACTOR}entropy_coeff (a fixed coefficient)",
    "log_entropy": f"verl logs actor/entropy with {ACTOR}calculate_entropy=true",
}
"""groupwise options verl has under its own name (docs/algorithms.md, "Policy losses: CISPO,
GMPO, SAPO", "Entropy controls"): refused under algorithm.groupwise, naming verl's key."""

NOT_IN_VERL = {
    "entropy_adaptive": "the adaptive entropy coefficient",
    "entropy_target": "the adaptive entropy coefficient",
    "entropy_coef_delta": "the adaptive entropy coefficient",
    "entropy_coef_min": "the adaptive entropy coefficient",
    "entropy_coef_max": "the adaptive entropy coefficient",
    "top_entropy_quantile": "the high-entropy token mask",
}
"""groupwise options verl's actor loss has no place for: refused when set to another value
than the default (groupwise train and GroupwiseGRPOTrainer have them)."""

ALGORITHM_KEYS = set(option_fields()) - {"advantage"}
VERL_KEYS = _fields(VerlOptions)


def read_options(config: Any, estimator: str) -> tuple[AlgorithmOptions, VerlOptions, bool]:
    """groupwise's options from verl's `algorithm` config (a DictConfig, an AlgoConfig or a
    mapping; its `groupwise` mapping may be absent) for groupwise estimator `estimator`, and
    verl's norm_adv_by_std_in_grpo. Raises ValueError naming an unknown or bad key."""
    given = _get(config, "groupwise") or {}
    if not isinstance(given, Mapping) and not hasattr(given, "items"):
        raise ValueError(f"{PREFIX[:-1]} must be a mapping of groupwise options, got {given!r}")
    values = dict(given.items())
    unknown = sorted(set(values) - ALGORITHM_KEYS - VERL_KEYS)
    if unknown:
        known = ", ".join(sorted(ALGORITHM_KEYS | VERL_KEYS))
        raise ValueError(f"{verl_name(unknown[0])}: no such groupwise option; known: {known}")
    _refuse_loss_options(values)
    algorithm = AlgorithmOptions(
        advantage=estimator, **{k: v for k, v in values.items() if k in ALGORITHM_KEYS}
    )
    if algorithm.lambda_measure == "grad":
        raise ValueError(
            f"{verl_name('lambda_measure')}=grad is not available in verl: it needs grad L_GRPO "
            "and grad L_pref apart (a second backward pass per micro-batch inside verl's actor); "
            "use loss or fixed"
        )
    verl = VerlOptions(**{k: v for k, v in values.items() if k in VERL_KEYS})
    check_options(verl, verl_name)
    if (verl.reward_min is None) != (verl.reward_max is None):
        raise ValueError(f"{verl_name('reward_min')} and {verl_name('reward_max')} go together")
    norm_by_std = _get(config, "norm_adv_by_std_in_grpo")
    return algorithm, verl, True if norm_by_std is None else bool(norm_by_std)


def _refuse_loss_options(values: Mapping[str, Any]) -> None:
    """One line naming the first policy-loss or entropy option set under algorithm.groupwise
    to another value than its default: verl's own key for it, or that verl has none."""
    defaults = option_fields()
    for key in sorted(set(values) & (set(VERL_OWN) | set(NOT_IN_VERL))):
        if values[key] == defaults[key].default:
            continue
        if key in VERL_OWN:
            raise ValueError(f"{verl_name(key)}: set {VERL_OWN[key]} instead")
        raise ValueError(
            f"{verl_name(key)}: {NOT_IN_VERL[key]} is not available in verl's actor loss; "
            "groupwise train and GroupwiseGRPOTrainer have it"
        )


@dataclass(frozen=True)
class VerlAlgorithm:
    """groupwise's algorithm for one verl run: the Algorithm (AMIR's lambda is its state), the
    verl-side options, the estimator's groupwise name and G, the responses per prompt it was
    built for (verl's actor_rollout_ref.rollout.n)."""

    algorithm: Algorithm
    verl: VerlOptions
    estimator: str
    group_size: int

    def check_group_size(self, size: int) -> None:
        """A batch whose uids give groups of `size` responses is one line naming both sizes:
        groups of another size would need another Algorithm, and a fresh lambda."""
        if size != self.group_size:
            raise ValueError(
                f"algorithm.adv_estimator={ESTIMATOR_PREFIX}{self.estimator}: the batch's uids "
                f"give groups of {size} responses, but groupwise's algorithm was built for "
                f"{self.group_size} (actor_rollout_ref.rollout.n)"
            )


def build_algorithm(config: Any, estimator: str, group_size: int) -> VerlAlgorithm:
    """AlgorithmOptions.build for verl (every check runs there, naming verl's keys): the
    estimator `estimator` (groupwise's name), verl's `algorithm` config, G = group_size; with the
    verl-side options. verl gives groupwise no reference policy (its KL is verl's own)."""
    options, verl, norm_by_std = read_options(config, estimator)
    bounds = None if verl.reward_min is None else (verl.reward_min, verl.reward_max)
    facts = RewardFacts(
        [bounds],
        [1.0],
        verl.correctness_value,
        correctness_hint="verl's score must be 0 or algorithm.groupwise.correctness_value",
    )
    scale = verl.scale if verl.scale != "verl" else ("group" if norm_by_std else "none")
    built = options.build(
        facts,
        group_size,
        name=lambda key: "algorithm.adv_estimator" if key == "advantage" else verl_name(key),
        no_reference="groupwise's AMIR term inside verl is reference-free (set "
        f"{verl_name('ref_free')}=true); verl's KL stays verl's own (actor.use_kl_loss)",
        scale=scale,
        std=verl.std,
        eps=verl.eps,
    )
    return VerlAlgorithm(built, verl, estimator, group_size)


def _get(config: Any, key: str) -> Any:
    if config is None:
        return None
    if isinstance(config, Mapping) or hasattr(config, "get"):
        return config.get(key)
    return getattr(config, key, None)
