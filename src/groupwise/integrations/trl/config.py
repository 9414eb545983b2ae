"""GroupwiseGRPOConfig: TRL's GRPOConfig plus the AMIR-GRPO and LENS options of groupwise.

Every option has the name, meaning and default of groupwise's own `algorithm.*` option
(groupwise.train.config.AlgorithmConfig), documented where it is declared, as TRL documents its
fields; the formulas are in REFERENCE.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from groupwise.algorithms import AdaptiveLambda, get_advantage_estimator
from groupwise.algorithms.advantages import LENS_DIFFICULTIES, LENS_MODES
from groupwise.algorithms.preference import PAIR_MODES

LAMBDA_MEASURES = ("loss", "fixed")
"""AdaptiveLambda measures available inside TRL (the "grad" measure is not, see lambda_measure)."""


@dataclass
class GroupwiseGRPOConfig(GRPOConfig):
    r"""
    Configuration class for [`GroupwiseGRPOTrainer`]: every [`~trl.GRPOConfig`] option, plus
    AMIR-GRPO (implicit preference pairs with an adaptive DPO-style term) and LENS (confidence-
    weighted negative rewards). Options not set keep plain TRL GRPO: a script switches by
    changing the two class names and adding options.

    Parameters:
        > Advantages (REFERENCE.md 1 and 3)

        advantage (`str`, *optional*, defaults to `"grpo"`):
            Advantage estimator, by name in `groupwise.algorithms.ADVANTAGE_ESTIMATORS`.
            `"grpo"` keeps TRL's own advantages, and its `scale_rewards` choice applies: `"group"`
            is groupwise's `scale_rewards=group` with `advantage_std=unbiased` and
            `advantage_eps=1e-4` (TRL's constants), `"batch"` is `batch`, `"none"` is Dr. GRPO's
            `none` (groupwise's `advantage_std=population` has no TRL equivalent). `"lens"`
            computes LENS advantages over the whole gathered generation batch; its mixed groups
            are normalised by their own unbiased std + 1e-4, so it needs `scale_rewards="group"`.
        lens_alpha (`float`, *optional*, defaults to `0.25`):
            LENS: weight alpha of negative-group advantages, >= 0 (paper 0.25).
        lens_mode (`str`, *optional*, defaults to `"full"`):
            LENS ablations of the paper's App. D.2: `"full"`, `"mixed_only"` (negative groups get
            0), `"negative_only"` (mixed groups use plain binary GRPO).
        lens_difficulty (`str`, *optional*, defaults to `"pbar"`):
            LENS's D_imp from the length-normalised confidence pbar (`"pbar"`, the paper's paragraph
            before Eq. 14) or the raw sequence probability (`"sequence"`, Eq. 14 as typeset).
        correctness_reward (`str` or `None`, *optional*, defaults to `None`):
            Name of the reward function (TRL's `reward_func_names`: a function's `__name__`) that
            says whether a completion is correct: LENS calibrates it and the `groups/*` metrics
            count it. `None`: the only reward function, when there is one.
        correct_value (`float`, *optional*, defaults to `1.0`):
            What the correctness reward function returns for a correct completion; it must return
            0 otherwise (AMIR-GRPO's `correctness` reward: 2.0).

        > AMIR-GRPO (REFERENCE.md 2)

        amir (`bool`, *optional*, defaults to `False`):
            Add the implicit-preference term `lambda_reg * L_pref` to TRL's loss.
        beta_dpo (`float`, *optional*, defaults to `0.5`):
            beta_DPO, temperature of the pair logit z, > 0 (official code's CLI 0.5).
        margin (`float`, *optional*, defaults to `2.0`):
            delta_r, in reward units: a pair (i, j) needs r_i - r_j > margin, strictly (official
            code 2.0 with its reward).
        pair_mode (`str`, *optional*, defaults to `"all"`):
            `"all"`: every ordered pair above the margin; `"topk"`: only pairs whose preferred side
            is the group's top completion.
        max_pairs_per_group (`int` or `None`, *optional*, defaults to `None`):
            Keep at most this many pairs per group, the largest reward gaps first; `None`: no cap.
        ref_free (`bool`, *optional*, defaults to `True`):
            l_ref = 0 (official code's effective default). `False`: the reference policy, i.e.
            TRL's reference log-probs when `beta > 0`, else the PEFT model with its adapter
            disabled (an extra no-grad pass).
        lambda_init (`float`, *optional*, defaults to `0.01`):
            Initial lambda_reg (official code 0.01).
        lambda_low (`float`, *optional*, defaults to `0.30`):
            Below this measured ratio lambda grows (official 0.30).
        lambda_high (`float`, *optional*, defaults to `0.70`):
            Above this measured ratio lambda shrinks (official 0.70).
        lambda_up (`float`, *optional*, defaults to `1.25`):
            Growth factor, > 1 (official 1.25).
        lambda_down (`float`, *optional*, defaults to `0.8`):
            Shrink factor, in (0, 1) (official 0.8).
        lambda_min (`float`, *optional*, defaults to `0.005`):
            Lower bound of lambda_reg (official 0.005).
        lambda_max (`float`, *optional*, defaults to `0.05`):
            Upper bound of lambda_reg (official 0.05).
        lambda_measure (`str`, *optional*, defaults to `"loss"`):
            `"loss"`: the official rule, once per generation batch as the official TRL 0.23 code:
            ratio = lambda * L_pref / max(1e-9, L_GRPO), with L_pref the mean pair loss of the
            whole generation batch at the rollout policy and L_GRPO the loss TRL's `_compute_loss`
            returns for the first micro-batch of that batch, times the gradient-accumulation
            steps TRL divided it by (averaged over processes); `"fixed"`: lambda stays at
            lambda_init. groupwise's `"grad"` measure needs two backward passes per micro-batch,
            which TRL's training step does not make: use groupwise's own trainer for it.
    """

    advantage: str = field(
        default="grpo",
        metadata={
            "help": "Advantage estimator by name: 'grpo' keeps TRL's advantages (with its "
            "scale_rewards); 'lens' computes LENS advantages over the gathered generation batch "
            "(needs scale_rewards='group'). REFERENCE.md 1 and 3."
        },
    )
    lens_alpha: float = field(
        default=0.25,
        metadata={"help": "LENS: weight alpha of negative-group advantages, >= 0 (paper 0.25)."},
    )
    lens_mode: str = field(
        default="full",
        metadata={
            "help": "LENS ablations (paper App. D.2): 'full', 'mixed_only' (negative groups get 0) "
            "or 'negative_only' (mixed groups use plain binary GRPO).",
            "choices": list(LENS_MODES),
        },
    )
    lens_difficulty: str = field(
        default="pbar",
        metadata={
            "help": "LENS's D_imp from the length-normalised confidence ('pbar', the paper's "
            "paragraph before Eq. 14) or the raw sequence probability ('sequence', Eq. 14).",
            "choices": list(LENS_DIFFICULTIES),
        },
    )
    correctness_reward: str | None = field(
        default=None,
        metadata={
            "help": "Name of the reward function that says whether a completion is correct (LENS "
            "calibrates it; groups/* metrics count it). None: the only reward function."
        },
    )
    correct_value: float = field(
        default=1.0,
        metadata={
            "help": "What the correctness reward function returns for a correct completion (it "
            "must return 0 otherwise); AMIR-GRPO's correctness reward: 2.0."
        },
    )
    amir: bool = field(
        default=False,
        metadata={"help": "AMIR-GRPO: add lambda_reg * L_pref to TRL's loss. REFERENCE.md 2."},
    )
    beta_dpo: float = field(
        default=0.5,
        metadata={"help": "beta_DPO, temperature of the pair logit, > 0 (official CLI 0.5)."},
    )
    margin: float = field(
        default=2.0,
        metadata={
            "help": "delta_r in reward units: a pair (i, j) needs r_i - r_j > margin, strictly "
            "(official code 2.0)."
        },
    )
    pair_mode: str = field(
        default="all",
        metadata={
            "help": "'all': every ordered pair above the margin; 'topk': only pairs whose "
            "preferred side is the group's top completion.",
            "choices": list(PAIR_MODES),
        },
    )
    max_pairs_per_group: int | None = field(
        default=None,
        metadata={"help": "Keep at most this many pairs per group, largest gaps first; None: all."},
    )
    ref_free: bool = field(
        default=True,
        metadata={
            "help": "l_ref = 0 (official default); False: TRL's reference log-probs (beta > 0) or "
            "the PEFT model with its adapter disabled."
        },
    )
    lambda_init: float = field(
        default=0.01, metadata={"help": "Initial lambda_reg (official 0.01)."}
    )
    lambda_low: float = field(
        default=0.30, metadata={"help": "Below this measured ratio lambda grows (official 0.30)."}
    )
    lambda_high: float = field(
        default=0.70, metadata={"help": "Above this measured ratio lambda shrinks (official 0.70)."}
    )
    lambda_up: float = field(default=1.25, metadata={"help": "Growth factor, > 1 (official 1.25)."})
    lambda_down: float = field(
        default=0.8, metadata={"help": "Shrink factor, in (0, 1) (official 0.8)."}
    )
    lambda_min: float = field(
        default=0.005, metadata={"help": "Lower bound of lambda_reg (official 0.005)."}
    )
    lambda_max: float = field(
        default=0.05, metadata={"help": "Upper bound of lambda_reg (official 0.05)."}
    )
    lambda_measure: str = field(
        default="loss",
        metadata={
            "help": "'loss': the official rule once per generation batch, lambda * L_pref (whole "
            "batch) against the first micro-batch's loss; 'fixed': lambda stays at lambda_init.",
            "choices": list(LAMBDA_MEASURES),
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        get_advantage_estimator(self.advantage)  # an unknown name is an error naming the known
        choices = {
            "lens_mode": (self.lens_mode, LENS_MODES),
            "lens_difficulty": (self.lens_difficulty, LENS_DIFFICULTIES),
            "pair_mode": (self.pair_mode, PAIR_MODES),
        }
        for name, (value, valid) in choices.items():
            if value not in valid:
                raise ValueError(f"{name}={value!r} is not one of {', '.join(valid)}")
        if self.lambda_measure == "grad":
            raise ValueError(
                "lambda_measure='grad' is not available with TRL: it needs the gradients of "
                "L_GRPO and L_pref apart, i.e. two backward passes per micro-batch, which TRL's "
                "training step does not make. Use 'loss' or 'fixed' (or groupwise's own trainer)"
            )
        if self.lambda_measure not in LAMBDA_MEASURES:
            raise ValueError(
                f"lambda_measure={self.lambda_measure!r} is not one of {', '.join(LAMBDA_MEASURES)}"
            )
        if not self.lens_alpha >= 0:
            raise ValueError(f"lens_alpha must be >= 0, got {self.lens_alpha}")
        if not self.beta_dpo > 0:
            raise ValueError(f"beta_dpo must be > 0, got {self.beta_dpo}")
        if not self.margin >= 0:
            raise ValueError(f"margin must be >= 0, got {self.margin}")
        if self.max_pairs_per_group is not None and self.max_pairs_per_group < 1:
            raise ValueError(
                f"max_pairs_per_group must be None or >= 1, got {self.max_pairs_per_group}"
            )
        try:
            self.adaptive_lambda()
        except ValueError as err:
            raise ValueError(f"lambda_* options: {err}") from None
        uses_groupwise = self.amir or self.advantage != "grpo"
        if uses_groupwise and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "amir and advantage estimators other than 'grpo' read the weighted sum of the "
                "rewards: they need multi_objective_aggregation='sum_then_normalize', got "
                f"{self.multi_objective_aggregation!r}"
            )
        if self.advantage != "grpo" and self.scale_rewards != "group":
            raise ValueError(
                f"advantage={self.advantage!r} normalises mixed groups by their own std "
                f"(REFERENCE.md 3): it needs scale_rewards='group', got {self.scale_rewards!r}"
            )
        if uses_groupwise and self.mask_truncated_completions:
            raise ValueError(
                "mask_truncated_completions=True removes truncated completions' tokens from "
                "TRL's mask, so their l(q, o) (AMIR-GRPO's pairs, LENS's confidence) cannot be "
                "measured; it is not supported with amir or a non-'grpo' advantage"
            )

    def adaptive_lambda(self) -> AdaptiveLambda:
        """A new AdaptiveLambda with these lambda_* options (REFERENCE.md 2)."""
        return AdaptiveLambda.from_options(self)
