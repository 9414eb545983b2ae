"""The options every engine shares: advantage estimator, LENS and AMIR-GRPO
(docs/algorithms.md §1-3).

`AlgorithmOptions` declares each option once, with its default, its valid range and its
documentation (field metadata "doc" and "valid"). groupwise's config section `algorithm` is a
subclass that adds the options of groupwise's own trainer (clip range, aggregation, mini-batches);
TRL's `GroupwiseGRPOConfig` declares the same options under TRL-style names, takes their defaults
and help from here, and validates through `AlgorithmOptions.check`. What an engine builds from
them: `advantage_settings`, `pair_settings`, `adaptive_lambda`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from groupwise.algorithms.estimators import AdvantageSettings, get_advantage_estimator
from groupwise.algorithms.preference import AdaptiveLambda
from groupwise.algorithms.targets import PairSettings


def option(
    default: Any, doc: str, valid: str | None = None, check: Callable[[Any], bool] | None = None
) -> Any:
    """A dataclass field with its documentation and, for numbers, its valid range in words
    (`valid`) and as a predicate (`check`)."""
    return field(
        default=default, metadata={"doc": " ".join(doc.split()), "valid": valid, "check": check}
    )


@dataclass
class AlgorithmOptions:
    """Advantage estimator, LENS (docs/algorithms.md §3) and AMIR-GRPO (docs/algorithms.md §2)
    options."""

    advantage: str = option(
        "grpo",
        """Advantage estimator, by name in groupwise.algorithms.ADVANTAGE_ESTIMATORS: grpo
        (group-normalised reward totals, docs/algorithms.md §1) | lens (calibrated negative rewards,
        docs/algorithms.md §3) | one registered with register_advantage_estimator.""",
    )
    lens_alpha: float = option(
        0.25,
        "LENS: weight alpha of the advantages of groups with no correct answer (paper "
        "0.25). docs/algorithms.md §3.",
        ">= 0",
        lambda v: v >= 0,
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
        "> 0",
        lambda v: v > 0,
    )
    margin: float = option(
        2.0,
        """delta_r, in the reward's own units: a pair (i, j) needs r_i - r_j > margin,
        strictly. The official 2.0 fits its summed reward (correctness 2.0 + format 0.5 +
        integer 0.2 + tags 0.2 + calibration 1.0); with a 0/1 correctness reward use a margin
        below 1 (0.5 pairs every correct with every wrong answer). A margin no two completions
        can exceed is refused when the reward's range is known, else warned about once.
        docs/algorithms.md §2.""",
        ">= 0",
        lambda v: v >= 0,
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
        ">= 1 (or null: all)",
        lambda v: v is None or v >= 1,
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
        "> 0",
        lambda v: v > 0,
    )
    lambda_low: float = option(
        0.30,
        "Below this measured ratio lambda grows (official 0.30). docs/algorithms.md §2.",
        ">= 0",
        lambda v: v >= 0,
    )
    lambda_high: float = option(
        0.70,
        "Above this measured ratio lambda shrinks (official 0.70), > lambda_low. "
        "docs/algorithms.md §2.",
        ">= 0",
        lambda v: v >= 0,
    )
    lambda_up: float = option(
        1.25, "Growth factor (official 1.25). docs/algorithms.md §2.", "> 1", lambda v: v > 1
    )
    lambda_down: float = option(
        0.8,
        "Shrink factor (official 0.8). docs/algorithms.md §2.",
        "in (0, 1)",
        lambda v: 0 < v < 1,
    )
    lambda_min: float = option(
        0.005,
        "Lower bound of lambda_reg (official 0.005). docs/algorithms.md §2.",
        "> 0",
        lambda v: v > 0,
    )
    lambda_max: float = option(
        0.05,
        "Upper bound of lambda_reg (official 0.05). docs/algorithms.md §2.",
        "> 0",
        lambda v: v > 0,
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
        ">= 1",
        lambda v: v >= 1,
    )

    def check(self, name: Callable[[str], str] = str) -> None:
        """Raise ValueError naming the first option outside its range or choices; `name` maps
        an option to the name the user typed (e.g. "algorithm.margin", "amir_margin")."""
        hints = typing.get_type_hints(type(self))
        for spec in dataclasses.fields(AlgorithmOptions):
            value = getattr(self, spec.name)
            choices = _choices(hints[spec.name])
            if choices and value not in choices:
                raise ValueError(f"{name(spec.name)}={value!r} is not one of {', '.join(choices)}")
            valid, ok = spec.metadata["valid"], spec.metadata["check"]
            if ok is not None and not ok(value):
                raise ValueError(f"{name(spec.name)} must be {valid}, got {value!r}")
        try:
            get_advantage_estimator(self.advantage)
        except ValueError as error:
            raise ValueError(f"{name('advantage')}: {error}") from None
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

    def needs_rollout_logp(self) -> bool:
        """Whether the rollout policy's l(q, o) is needed: by AMIR's coefficients or by an
        estimator that declares it."""
        return self.amir or get_advantage_estimator(self.advantage).needs_rollout_logp


def option_fields() -> dict[str, dataclasses.Field]:
    """AlgorithmOptions' fields by name (default, metadata "doc" and "valid")."""
    return {spec.name: spec for spec in dataclasses.fields(AlgorithmOptions)}


def _choices(hint: Any) -> tuple[Any, ...]:
    """The values a Literal type allows; () for any other type."""
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else ()
