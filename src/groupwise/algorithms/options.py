"""The options every engine shares, and what an engine builds from them (docs/algorithms.md §1-3).

`AlgorithmOptions` declares each option once, with its default, its valid range and its
documentation (`groupwise.options.option`: field metadata "doc", "valid", "check"), the way
every other configuration of groupwise declares its fields (train, eval, sft). groupwise's config
section `algorithm` is a subclass that adds the options of groupwise's own trainer (clip range,
aggregation, mini-batches); TRL's `GroupwiseGRPOConfig` and verl's adapter declare the same
options under their own names.

An engine calls `AlgorithmOptions.build` once, with what it knows of its reward (`RewardFacts`)
and whether it can provide a reference policy. Every check of the options against the engine
runs there (ranges, the correctness signal LENS needs, an AMIR margin no pair can exceed, the
reference policy), and it returns the `Algorithm`: the estimator and its settings, AMIR's pair
settings and AdaptiveLambda, the pairless-batch warning, and what the engine must provide.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from groupwise.algorithms.entropy import AdaptiveEntropy
from groupwise.algorithms.estimators import (
    AdvantageEstimator,
    AdvantageSettings,
    GroupRewards,
    get_advantage_estimator,
)
from groupwise.algorithms.objective import LossSettings
from groupwise.algorithms.preference import AdaptiveLambda
from groupwise.algorithms.surrogates import SurrogateParams, get_policy_loss
from groupwise.algorithms.targets import (
    GroupTargets,
    PairlessWarning,
    PairSettings,
    group_targets,
    unreachable_margin,
)
from groupwise.options import check_options, option


@dataclass(frozen=True)
class RewardFacts:
    """What an engine knows of its reward before training, for `AlgorithmOptions.build`.

    ranges: each reward part's (min, max) value, None where unknown. weights: each part's weight.
    correct_reward: what the correctness part adds to the total for a correct answer (weight x
        its correct value; LENS calibrates it, AMIR's largest gap widens by it under LENS);
        None when the engine has no binary correctness signal.
    correctness_hint: when correct_reward is None, why, and which option gives one (the
        message of the refusal when the estimator needs correctness).
    """

    ranges: list[tuple[float, float] | None]
    weights: list[float]
    correct_reward: float | None
    correctness_hint: str = "name the reward part that says whether an answer is correct"


@dataclass(frozen=True)
class Algorithm:
    """What an engine runs, built once from the options (`AlgorithmOptions.build`).

    estimator, advantage_settings: the advantage estimator by name and its settings.
    pair_settings, lambda_reg, pairless: AMIR-GRPO's pair mining, its adaptive lambda (state:
        the engine saves it with checkpoints) and the warning for batches without pairs; None
        without AMIR.
    needs_reference: the engine must give l_ref / the reference log-probs (KL, or AMIR with a
        reference). needs_rollout_logp: it must give the rollout policy's l(q, o) (LENS's
        confidences, AMIR's coefficients). needs_correctness: it must give the binary
        correctness of each completion (LENS).
    """

    options: AlgorithmOptions
    estimator: AdvantageEstimator
    advantage_settings: AdvantageSettings
    pair_settings: PairSettings | None
    lambda_reg: AdaptiveLambda | None
    pairless: PairlessWarning | None
    needs_reference: bool
    needs_rollout_logp: bool
    needs_correctness: bool
    adaptive_entropy: AdaptiveEntropy | None = None

    @property
    def needs_entropy(self) -> bool:
        """Whether the engine must compute the per-token entropies: an entropy control is on,
        or log_entropy."""
        return self.options.log_entropy or self.loss_settings(LossSettings()).needs_entropy

    def entropy_coef(self) -> float:
        """The entropy bonus's coefficient for the next update: fixed, or the adaptive one's."""
        if self.adaptive_entropy is not None:
            return self.adaptive_entropy.applied
        return self.options.entropy_coef

    def loss_settings(self, base: LossSettings) -> LossSettings:
        """`base` (an engine's clip range, ratio level, aggregation, KL) with these options'
        policy loss, its parameters and the entropy controls (docs/algorithms.md, "Policy
        losses: CISPO, GMPO, SAPO" and "Entropy controls")."""
        o = self.options
        return dataclasses.replace(
            base,
            policy_loss=o.policy_loss,
            surrogate=o.surrogate_params(base.eps_low, base.eps_high),
            top_entropy_quantile=o.top_entropy_quantile,
            entropy_bonus=o.entropy_coef > 0 or o.entropy_adaptive,
        )

    def targets(self, batch: GroupRewards, **kwargs: Any) -> GroupTargets:
        """The batch's advantages, AMIR pairs and coefficients (`group_targets` with this
        algorithm's estimator, settings and pairs; kwargs: its keyword arguments)."""
        return group_targets(
            batch, self.estimator, self.advantage_settings, self.pair_settings, **kwargs
        )


@dataclass
class AlgorithmOptions:
    """Advantage estimator, LENS (docs/algorithms.md §3), AMIR-GRPO (docs/algorithms.md §2), the
    policy loss (docs/algorithms.md, "Policy losses: CISPO, GMPO, SAPO") and entropy controls
    (docs/algorithms.md, "Entropy controls") options."""

    advantage: str = option(
        "grpo",
        """Advantage estimator, by name in groupwise.algorithms.ADVANTAGE_ESTIMATORS: grpo
        (group-normalised reward totals, docs/algorithms.md §1) | lens (calibrated negative rewards,
        docs/algorithms.md §3) | rloo (leave-one-out baseline, docs/algorithms.md, "RLOO") |
        reinforce_plus_plus_baseline (group-mean baseline, then whitened over the batch's
        tokens: REINFORCE++-baseline, docs/algorithms.md, "REINFORCE++-baseline") | one
        registered with register_advantage_estimator.""",
    )
    policy_loss: Literal["clip", "cispo", "gmpo", "sapo"] = option(
        "clip",
        """The policy loss: clip (GRPO's clipped surrogate, docs/algorithms.md §1) | cispo
        (CISPO: the clipped IS weight as a constant times A log pi; MiniMax-M1) | gmpo (GMPO:
        the geometric mean of the token ratios, clipped in log space) | sapo (SAPO: a soft
        sigmoid gate in place of the clip). docs/algorithms.md, "Policy losses: CISPO, GMPO,
        SAPO". AMIR's term, LENS's advantages and the entropy controls combine with each.""",
    )
    cispo_eps_low: float | None = option(
        None,
        """CISPO: the IS weight is clipped below at 1 - cispo_eps_low; null = no lower bound
        (MiniMax-M1: eps_low^IS left large). docs/algorithms.md, "CISPO".""",
        ge=0,
        lt=1,
        allow_none=True,
        note="(or null: none)",
    )
    cispo_eps_high: float = option(
        4.0,
        """CISPO: the IS weight is clipped above at 1 + cispo_eps_high (4.0: TRL's recommended
        epsilon_max 5.0 of ScaleRL). docs/algorithms.md, "CISPO".""",
        ge=0,
    )
    gmpo_eps_low: float = option(
        0.4,
        """GMPO: each token's log ratio is clipped below at -gmpo_eps_low (the paper's
        (e^-0.4, e^0.4)). docs/algorithms.md, "GMPO".""",
        gt=0,
    )
    gmpo_eps_high: float = option(
        0.4,
        """GMPO: each token's log ratio is clipped above at gmpo_eps_high. docs/algorithms.md,
        "GMPO".""",
        gt=0,
    )
    sapo_tau_pos: float = option(
        1.0,
        """SAPO: the gate's temperature where A > 0 (paper, TRL and verl 1.0).
        docs/algorithms.md, "SAPO".""",
        gt=0,
    )
    sapo_tau_neg: float = option(
        1.05,
        """SAPO: the gate's temperature where A <= 0 (paper, TRL and verl 1.05).
        docs/algorithms.md, "SAPO".""",
        gt=0,
    )
    entropy_coef: float = option(
        0.0,
        """Entropy bonus: loss - entropy_coef x the aggregated token entropy of the tokens the
        policy loss sees (0: off, no entropy computed); with entropy_adaptive, the initial
        coefficient. docs/algorithms.md, "Entropy controls".""",
        ge=0,
    )
    entropy_adaptive: bool = option(
        False,
        """Skywork-OR1's adaptive entropy coefficient: after each update it moves by
        entropy_coef_delta toward more bonus while the mean token entropy is at or below
        entropy_target, less above it; the bonus applies only while entropy <= the target.
        docs/algorithms.md, "Entropy controls".""",
    )
    entropy_target: float = option(
        0.2,
        """Target mean token entropy (nats) of the adaptive coefficient (TRL's default 0.2;
        set it near the entropy of the run's first steps). docs/algorithms.md, "Entropy
        controls".""",
        ge=0,
    )
    entropy_coef_delta: float = option(
        0.005,
        """Step of the adaptive coefficient per update (TRL's default). docs/algorithms.md,
        "Entropy controls".""",
        ge=0,
    )
    entropy_coef_min: float = option(
        0.0,
        'Lower bound of the adaptive coefficient. docs/algorithms.md, "Entropy controls".',
        ge=0,
    )
    entropy_coef_max: float = option(
        1.0,
        'Upper bound of the adaptive coefficient. docs/algorithms.md, "Entropy controls".',
        ge=0,
    )
    log_entropy: bool = option(
        False,
        """Log the mean token entropy of each update (metric `entropy`) without an entropy
        control (each control logs it anyway); it costs one more softmax pass over each chunk
        of logits. docs/algorithms.md, "Entropy controls".""",
    )
    top_entropy_quantile: float = option(
        1.0,
        """The policy loss only on the top rho of a micro-batch's completion tokens by entropy
        ("Beyond the 80/20 Rule": 0.2; TRL's top_entropy_quantile); 1 = every token; the other
        tokens still count in the aggregation's means. docs/algorithms.md, "Entropy
        controls".""",
        ge=0,
        le=1,
    )
    lens_alpha: float = option(
        0.25,
        "LENS: weight alpha of the advantages of groups with no correct answer (paper "
        "0.25). docs/algorithms.md §3.",
        ge=0,
    )
    lens_mode: Literal["full", "mixed_only", "negative_only"] = option(
        "full",
        """LENS ablations of the paper's App. D.2: full | mixed_only (groups with no
        correct answer get 0) | negative_only (mixed groups use plain binary GRPO).
        docs/algorithms.md §3.""",
    )
    lens_difficulty: Literal["pbar", "sequence"] = option(
        "pbar",
        """LENS's D_imp from the length-normalised confidence pbar (ours: the paper's
        paragraph before Eq. 14) or the raw sequence probability (Eq. 14 as typeset).
        docs/algorithms.md §3.""",
    )
    amir: bool = option(
        False,
        "AMIR-GRPO: add the implicit-preference term lambda_reg * L_pref to the loss. "
        "docs/algorithms.md §2.",
    )
    beta_dpo: float = option(
        0.5,
        """beta_DPO, temperature of the pair logit z (official code's CLI 0.5; its
        README's Gemma run 0.2). docs/algorithms.md §2.""",
        gt=0,
    )
    margin: float = option(
        2.0,
        """delta_r, in the reward's own units: a pair (i, j) needs r_i - r_j > margin,
        strictly. The official 2.0 fits its summed reward (correctness 2.0 + format 0.5 +
        integer 0.2 + tags 0.2 + calibration 1.0); with a 0/1 correctness reward use a margin
        below 1 (0.5 pairs every correct with every wrong answer). A margin no two completions
        can exceed is refused when the reward's range is known, else warned about once.
        docs/algorithms.md §2.""",
        ge=0,
    )
    pair_mode: Literal["all", "topk"] = option(
        "all",
        """all: every ordered pair above the margin (official default); topk: only
        pairs whose preferred side is the group's top completion. docs/algorithms.md §2.""",
    )
    max_pairs_per_group: int | None = option(
        None,
        """Keep at most this many pairs per group, the largest reward gaps first; null =
        no cap (official code's option). docs/algorithms.md §2.""",
        ge=1,
        allow_none=True,
        note="(or null: all)",
    )
    ref_free: bool = option(
        True,
        """l_ref = 0 (official code's effective default); false = the frozen starting
        model as reference (with LoRA: the adapter disabled). docs/algorithms.md §2.""",
    )
    lambda_init: float = option(
        0.01,
        "Initial lambda_reg (official code 0.01), within [lambda_min, lambda_max]. "
        "docs/algorithms.md §2.",
        gt=0,
    )
    lambda_low: float = option(
        0.30,
        "Below this measured ratio lambda grows (official 0.30). docs/algorithms.md §2.",
        ge=0,
    )
    lambda_high: float = option(
        0.70,
        "Above this measured ratio lambda shrinks (official 0.70), > lambda_low. "
        "docs/algorithms.md §2.",
        ge=0,
    )
    lambda_up: float = option(
        1.25,
        "Growth factor (official 1.25). docs/algorithms.md §2.",
        gt=1,
    )
    lambda_down: float = option(
        0.8,
        "Shrink factor (official 0.8). docs/algorithms.md §2.",
        gt=0,
        lt=1,
    )
    lambda_min: float = option(
        0.005,
        "Lower bound of lambda_reg (official 0.005). docs/algorithms.md §2.",
        gt=0,
    )
    lambda_max: float = option(
        0.05,
        "Upper bound of lambda_reg (official 0.05). docs/algorithms.md §2.",
        gt=0,
    )
    lambda_measure: Literal["loss", "grad", "fixed"] = option(
        "loss",
        """What the ratio of the lambda rule measures: loss (official: lambda L_pref /
        L_GRPO on each loss computation; on-policy with whole groups L_GRPO is about 0, so
        lambda tends to its floor), grad (ours: ||lambda grad L_pref|| / ||grad L_GRPO||),
        fixed (lambda stays at lambda_init). docs/algorithms.md §2.""",
    )
    lambda_every: int = option(
        1,
        """With lambda_measure=grad: measure every N steps (each measure costs one more
        backward pass of the preference term). Ours.""",
        ge=1,
    )

    def check(self, name: Callable[[str], str] = str) -> None:
        """Raise ValueError naming the first option outside its range, choices or order
        (`check_values`), or an unknown estimator; `name` maps an option to the name the user
        typed."""
        self.check_values(name)
        try:
            get_advantage_estimator(self.advantage)
        except ValueError as error:
            raise ValueError(f"{name('advantage')}: {error}") from None

    def check_values(self, name: Callable[[str], str] = str) -> None:
        """`check` without the estimator's name, which a registry that plugins extend resolves:
        each option in its range or choices, the orders of the lambda rule's bounds."""
        check_options(self, name)
        if not self.lambda_min <= self.lambda_init <= self.lambda_max:
            raise ValueError(
                f"{name('lambda_init')} must lie in [{name('lambda_min')}, {name('lambda_max')}]"
                f" = [{self.lambda_min}, {self.lambda_max}], got {self.lambda_init}"
            )
        if not self.lambda_low < self.lambda_high:
            raise ValueError(
                f"{name('lambda_low')} must be < {name('lambda_high')}, got "
                f"{self.lambda_low} and {self.lambda_high}"
            )
        self._check_entropy(name)

    def _check_entropy(self, name: Callable[[str], str]) -> None:
        """The adaptive coefficient's bounds around its start; GMPO's geometric mean has no
        place for tokens left out by the high-entropy mask."""
        if self.entropy_adaptive and not (
            self.entropy_coef_min <= self.entropy_coef <= self.entropy_coef_max
        ):
            raise ValueError(
                f"{name('entropy_coef')} must lie in [{name('entropy_coef_min')}, "
                f"{name('entropy_coef_max')}] = [{self.entropy_coef_min}, "
                f"{self.entropy_coef_max}] with {name('entropy_adaptive')}, got {self.entropy_coef}"
            )
        if self.policy_loss == "gmpo" and self.top_entropy_quantile < 1:
            raise ValueError(
                f"{name('top_entropy_quantile')}={self.top_entropy_quantile} cannot combine with "
                f"{name('policy_loss')}=gmpo: a completion's loss is the geometric mean of all its "
                "token ratios, with no token left out"
            )

    def build(
        self,
        rewards: RewardFacts,
        group_size: int,
        *,
        name: Callable[[str], str] = str,
        kl_coef: float = 0.0,
        no_reference: str | None = None,
        scale: str = "group",
        std: str = "unbiased",
        eps: float = 1e-4,
        ratio_level: str = "token",
    ) -> Algorithm:
        """The Algorithm an engine runs, after every check of these options against it.

        Args:
            rewards: what the engine knows of its reward (ranges, weights, correctness).
            group_size: G, completions per question.
            name: option -> the name the user typed, for messages.
            kl_coef: gamma of the engine's KL term, if groupwise computes it (a reference is
                then needed).
            no_reference: None when the engine can give a reference policy; otherwise why it
                cannot and what would give one (the message of the refusal).
            scale, std, eps: GRPO's std settings, the engine's (docs/algorithms.md §1).
            ratio_level: where the engine takes the importance ratio ("token" | "sequence",
                GSPO); CISPO and GMPO take token ratios.

        Raises:
            ValueError: one line naming the option: out of range, an estimator that needs a
                correctness signal the reward lacks, a margin no pair can exceed
                (docs/algorithms.md §2), a reference policy the engine cannot give.
        """
        self.check(name)
        estimator = get_advantage_estimator(self.advantage)
        if ratio_level == "sequence" and not get_policy_loss(self.policy_loss).sequence_ratio:
            raise ValueError(
                f"{name('policy_loss')}={self.policy_loss} takes token-level importance ratios, "
                "not the sequence-level ratio (GSPO) this run asks for"
            )
        if estimator.needs_correctness and rewards.correct_reward is None:
            raise ValueError(
                f"{name('advantage')}={self.advantage} needs a binary correctness signal: "
                f"{rewards.correctness_hint}"
            )
        needs_reference = kl_coef > 0 or (self.amir and not self.ref_free)
        if needs_reference and no_reference is not None:
            what = "a KL term" if kl_coef > 0 else f"{name('ref_free')}=false"
            raise ValueError(f"{what} needs a reference policy: {no_reference}")
        if self.amir:
            problem = unreachable_margin(
                self.margin,
                estimator,
                rewards.ranges,
                rewards.weights,
                rewards.correct_reward or 0.0,
                group_size,
                option=name("margin"),
            )
            if problem is not None:
                raise ValueError(problem)
        return Algorithm(
            options=self,
            estimator=estimator,
            advantage_settings=self.advantage_settings(scale, std, eps),
            pair_settings=self.pair_settings(),
            lambda_reg=self.adaptive_lambda(),
            pairless=PairlessWarning(self.margin, name("margin")) if self.amir else None,
            needs_reference=needs_reference,
            needs_rollout_logp=self.needs_rollout_logp(),
            needs_correctness=estimator.needs_correctness,
            adaptive_entropy=self.adaptive_entropy(),
        )

    def advantage_settings(
        self, scale: str = "group", std: str = "unbiased", eps: float = 1e-4
    ) -> AdvantageSettings:
        """The estimator's settings: LENS's from here, GRPO's std (`scale`, `std`, `eps`)
        from the engine (docs/algorithms.md §1)."""
        return AdvantageSettings(
            scale=scale,
            std=std,
            eps=eps,
            lens_alpha=self.lens_alpha,
            lens_mode=self.lens_mode,
            lens_difficulty=self.lens_difficulty,
        )

    def pair_settings(self) -> PairSettings | None:
        """AMIR-GRPO's pair mining and preference term; None without AMIR."""
        if not self.amir:
            return None
        return PairSettings(self.margin, self.pair_mode, self.max_pairs_per_group, self.beta_dpo)

    def adaptive_lambda(self) -> AdaptiveLambda | None:
        """A new AdaptiveLambda with the lambda_* options; None without AMIR."""
        if not self.amir:
            return None
        return AdaptiveLambda(
            init=self.lambda_init,
            low=self.lambda_low,
            high=self.lambda_high,
            up=self.lambda_up,
            down=self.lambda_down,
            min_value=self.lambda_min,
            max_value=self.lambda_max,
            measure=self.lambda_measure,
            every=self.lambda_every,
        )

    def surrogate_params(self, eps_low: float = 0.2, eps_high: float = 0.2) -> SurrogateParams:
        """The policy losses' options, with an engine's GRPO clip range."""
        return SurrogateParams(
            eps_low=eps_low,
            eps_high=eps_high,
            cispo_eps_low=self.cispo_eps_low,
            cispo_eps_high=self.cispo_eps_high,
            gmpo_eps_low=self.gmpo_eps_low,
            gmpo_eps_high=self.gmpo_eps_high,
            sapo_tau_pos=self.sapo_tau_pos,
            sapo_tau_neg=self.sapo_tau_neg,
        )

    def adaptive_entropy(self) -> AdaptiveEntropy | None:
        """A new AdaptiveEntropy with the entropy_* options; None unless entropy_adaptive."""
        if not self.entropy_adaptive:
            return None
        return AdaptiveEntropy(
            init=self.entropy_coef,
            target=self.entropy_target,
            delta=self.entropy_coef_delta,
            min_value=self.entropy_coef_min,
            max_value=self.entropy_coef_max,
        )

    def needs_rollout_logp(self) -> bool:
        """Whether the rollout policy's l(q, o) is needed: by AMIR's coefficients or by an
        estimator that declares it."""
        return self.amir or get_advantage_estimator(self.advantage).needs_rollout_logp


def option_fields() -> dict[str, dataclasses.Field]:
    """AlgorithmOptions' fields by name (default, metadata "doc" and "valid")."""
    return {spec.name: spec for spec in dataclasses.fields(AlgorithmOptions)}
