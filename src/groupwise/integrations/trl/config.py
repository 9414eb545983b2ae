"""GroupwiseGRPOConfig: TRL's GRPOConfig plus the AMIR-GRPO and LENS options of groupwise.

The options are groupwise's shared algorithm options (groupwise.algorithms.AlgorithmOptions:
one declaration of each default, range and documentation) under TRL-style names: a feature's
options share its prefix, as TRL's `vllm_*` and `sapo_*` do (TRL_NAMES). Their help text comes
from AlgorithmOptions, plus what differs inside TRL (TRL_NOTES); validation goes through
AlgorithmOptions.check, naming the TRL option. The formulas are in docs/algorithms.md. Where
TRL has an option of its own (CISPO and SAPO as loss_type, the entropy controls), that option is
the one, and TRL's code runs it (TRL_NATIVE); GMPO, which TRL lacks, runs through groupwise's
core (`gmpo`, `gmpo_epsilon_*`); what TRL cannot do is listed in NOT_IN_TRL.

Renamed from the first release (flat names): advantage -> advantage_estimator, beta_dpo ->
amir_beta, margin -> amir_margin, pair_mode -> amir_pair_mode, max_pairs_per_group ->
amir_max_pairs_per_group, ref_free -> amir_ref_free, lambda_* -> amir_lambda_*,
correct_value -> correctness_value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin, get_type_hints

from trl import GRPOConfig

from groupwise.algorithms import AlgorithmOptions
from groupwise.algorithms.options import option_fields

TRL_NAMES = {
    "advantage": "advantage_estimator",
    "lens_alpha": "lens_alpha",
    "lens_mode": "lens_mode",
    "lens_difficulty": "lens_difficulty",
    "amir": "amir",
    "beta_dpo": "amir_beta",
    "margin": "amir_margin",
    "pair_mode": "amir_pair_mode",
    "max_pairs_per_group": "amir_max_pairs_per_group",
    "ref_free": "amir_ref_free",
    "lambda_init": "amir_lambda_init",
    "lambda_low": "amir_lambda_low",
    "lambda_high": "amir_lambda_high",
    "lambda_up": "amir_lambda_up",
    "lambda_down": "amir_lambda_down",
    "lambda_min": "amir_lambda_min",
    "lambda_max": "amir_lambda_max",
    "lambda_measure": "amir_lambda_measure",
    "gmpo_eps_low": "gmpo_epsilon_low",
    "gmpo_eps_high": "gmpo_epsilon_high",
}
"""groupwise's algorithm option -> its GroupwiseGRPOConfig name. Not exposed: lambda_every (it
paces lambda_measure="grad", which TRL's training step cannot make: see amir_lambda_measure)."""

TRL_NATIVE = {
    "policy_loss": "loss_type",
    "cispo_eps_high": "epsilon_high",
    "sapo_tau_pos": "sapo_temperature_pos",
    "sapo_tau_neg": "sapo_temperature_neg",
    "entropy_coef": "entropy_coef",
    "entropy_adaptive": "use_adaptive_entropy",
    "entropy_target": "entropy_target",
    "entropy_coef_delta": "entropy_coef_delta",
    "entropy_coef_min": "entropy_coef_min",
    "entropy_coef_max": "entropy_coef_max",
    "top_entropy_quantile": "top_entropy_quantile",
}
"""groupwise's algorithm option -> TRL's own GRPOConfig option of the same meaning: TRL's code
runs them (docs/algorithms.md, "Policy losses: CISPO, GMPO, SAPO", "Entropy controls").
policy_loss cispo / sapo is loss_type="cispo" / "sapo"; TRL's other loss types are the clipped
surrogate. CISPO's ceiling: TRL's epsilon_high is the absolute bound 1 + cispo_eps_high
(docs/open-questions.md)."""

NOT_IN_TRL = {
    "cispo_eps_low": "TRL's CISPO clips the IS weight above only",
    "log_entropy": "TRL logs the entropy metric always",
}
"""groupwise's algorithm options TRL has no place for, and why (lambda_every: TRL_NAMES)."""

LAMBDA_MEASURES = ("loss", "fixed")
"""AdaptiveLambda measures available inside TRL."""

TRL_NOTES = {
    "advantage": """Inside TRL: "grpo" keeps TRL's own advantages, so TRL's `scale_rewards`
    applies ("group" is groupwise's scale_rewards=group with the unbiased std and eps 1e-4,
    TRL's constants; "batch"; "none" is Dr. GRPO); "lens" computes LENS advantages over the
    whole gathered generation batch and needs scale_rewards="group".""",
    "margin": """With a reward whose range is known when the trainer is built (groupwise's
    `reward_functions`, or the correctness reward of `correctness_reward` /
    `correctness_value`) a margin at or above it is refused; otherwise a warning comes once,
    after the first generation batch whose groups have differing rewards but no pair.""",
    "ref_free": """False: TRL's reference log-probs when `beta` > 0, else the PEFT model
    with its adapter disabled (an extra no-grad pass).""",
    "lambda_measure": """Inside TRL "loss" is applied once per generation batch, as the
    official TRL 0.23 code: ratio = lambda * L_pref / max(1e-9, L_GRPO), with L_pref the mean
    pair loss of the whole generation batch at the rollout policy and L_GRPO the loss TRL's
    `_compute_loss` returns for its first micro-batch (times the accumulation steps it divided
    by, averaged over processes). With one micro-batch per generation batch (TRL's default)
    that micro-batch is on-policy and holds whole groups, so L_GRPO is about 0 and lambda
    sinks to amir_lambda_min (a warning says so after 20 generation batches at a bound). The
    bounds [0.005, 0.05] are the official ones for TRL's "grpo"-like losses; a loss_type that
    scales the GRPO gradient differently (luspo larger by about the completion length, dr_grpo
    smaller) changes what a given lambda weighs. "grad" is not available: it needs grad L_GRPO
    and grad L_pref apart, i.e. a second backward pass per micro-batch and a change of the
    gradient between accumulation and clipping, which TRL's training step (and DeepSpeed/FSDP
    sharded gradients) do not allow; use groupwise's own trainer for it.""",
}
"""What an option means inside TRL beyond its groupwise documentation, by groupwise name."""


def _help(name: str) -> str:
    spec = option_fields()[name]
    valid = spec.metadata.get("valid")
    note = " ".join(TRL_NOTES.get(name, "").split())
    return " ".join(
        part for part in (spec.metadata["doc"], valid and f"Valid: {valid}.", note) if part
    )


def _option(name: str, **metadata: Any) -> Any:
    """A field with the default and help of groupwise's algorithm option `name`."""
    return field(default=option_fields()[name].default, metadata={"help": _help(name), **metadata})


def _choices(name: str) -> dict[str, list[str]]:
    hint = get_type_hints(AlgorithmOptions)[name]
    return {"choices": list(get_args(hint))} if get_origin(hint) is Literal else {}


@dataclass
class GroupwiseGRPOConfig(GRPOConfig):
    """Configuration class for `GroupwiseGRPOTrainer`: every `trl.GRPOConfig` option, plus
    AMIR-GRPO (implicit preference pairs with an adaptive DPO-style term) and LENS (confidence-
    weighted negative rewards). Options not set keep plain TRL GRPO: a script switches by
    changing the two class names and adding options. The parameters below are generated from
    groupwise.algorithms.AlgorithmOptions (see `GroupwiseGRPOConfig.__doc__`)."""

    advantage_estimator: str = _option("advantage")
    lens_alpha: float = _option("lens_alpha")
    lens_mode: str = _option("lens_mode", **_choices("lens_mode"))
    lens_difficulty: str = _option("lens_difficulty", **_choices("lens_difficulty"))
    correctness_reward: str | None = field(
        default=None,
        metadata={
            "help": "Name of the reward function (TRL's reward_func_names: a function's "
            "__name__) that says whether a completion is correct: LENS calibrates it, the "
            "groups/* metrics count it, and with it AMIR's margin is checked against the "
            "reward's range. None: the only reward function when there is one and LENS is on."
        },
    )
    correctness_value: float = field(
        default=1.0,
        metadata={
            "help": "What the correctness reward function returns for a correct completion; it "
            "must return 0 otherwise (AMIR-GRPO's `correctness` reward: 2.0)."
        },
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO's dynamic sampling (drop constant-reward groups, draw more prompts): "
            "not available with TRL, whose training step generates one fixed batch of prompts; "
            "True is refused (groupwise's own trainer has rollout.dynamic_sampling)."
        },
    )
    amir: bool = _option("amir")
    amir_beta: float = _option("beta_dpo")
    amir_margin: float = _option("margin")
    amir_pair_mode: str = _option("pair_mode", **_choices("pair_mode"))
    amir_max_pairs_per_group: int | None = _option("max_pairs_per_group")
    amir_ref_free: bool = _option("ref_free")
    amir_lambda_init: float = _option("lambda_init")
    amir_lambda_low: float = _option("lambda_low")
    amir_lambda_high: float = _option("lambda_high")
    amir_lambda_up: float = _option("lambda_up")
    amir_lambda_down: float = _option("lambda_down")
    amir_lambda_min: float = _option("lambda_min")
    amir_lambda_max: float = _option("lambda_max")
    amir_lambda_measure: str = _option("lambda_measure", choices=list(LAMBDA_MEASURES))
    gmpo: bool = field(
        default=False,
        metadata={
            "help": 'GMPO (docs/algorithms.md, "GMPO"), which TRL does not have, through '
            "groupwise's algorithm core: TRL's loss runs with loss_type='grpo' and its clipped "
            "surrogate is replaced by the geometric mean of the token ratios, clipped in log "
            "space to [-gmpo_epsilon_low, gmpo_epsilon_high]. Needs loss_type='grpo', "
            "importance_sampling_level='token', no vLLM importance-sampling correction, no "
            "off-policy mask, delta None and top_entropy_quantile 1."
        },
    )
    gmpo_epsilon_low: float = _option("gmpo_eps_low")
    gmpo_epsilon_high: float = _option("gmpo_eps_high")
    log_rollouts: bool = field(
        default=False,
        metadata={
            "help": "Write OUTPUT_DIR/rollouts.jsonl in the format of groupwise's own trainer, "
            "so that `groupwise view OUTPUT_DIR --output page.html` shows the run's steps, "
            "groups, completions, rewards, advantages and AMIR pairs: one line per generation "
            "batch, whose step is TRL's global step when the batch was generated plus 1 (the "
            "first optimizer step that learns from it). The main process writes it; a run "
            "resumed from a checkpoint moves the lines after the checkpoint's step to "
            "rollouts.jsonl.set-aside. What TRL cannot give is null: "
            'docs/guides/trl.md, "Its rollouts, for groupwise view".'
        },
    )
    log_rollouts_answer_column: str = field(
        default="answer",
        metadata={
            "help": "The dataset column whose values rollouts.jsonl logs as the gold answers "
            "(null where the dataset has no such column)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        options = self.algorithm_options()
        try:
            options.check(lambda name: TRL_NAMES.get(name) or TRL_NATIVE.get(name, name))
        except ValueError as err:
            raise ValueError(str(err)) from None
        if self.amir_lambda_measure not in LAMBDA_MEASURES:
            raise ValueError(
                f"amir_lambda_measure={self.amir_lambda_measure!r} is not available with TRL "
                f"(choose one of {', '.join(LAMBDA_MEASURES)}): the 'grad' measure needs grad "
                "L_GRPO and grad L_pref apart, i.e. a second backward pass per micro-batch and a "
                "change of the gradient between accumulation and clipping, which TRL's training "
                "step does not allow; use groupwise's own trainer for it"
            )
        uses_groupwise = self.amir or self.advantage_estimator != "grpo"
        if uses_groupwise and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "amir and advantage estimators other than 'grpo' read the weighted sum of the "
                "rewards: they need multi_objective_aggregation='sum_then_normalize', got "
                f"{self.multi_objective_aggregation!r}"
            )
        if self.advantage_estimator != "grpo" and self.scale_rewards != "group":
            raise ValueError(
                f"advantage_estimator={self.advantage_estimator!r} normalises mixed groups by "
                "their own std (docs/algorithms.md §3): it needs scale_rewards='group', got "
                f"{self.scale_rewards!r}"
            )
        self._check_gmpo()
        if self.dynamic_sampling:
            raise ValueError(
                "dynamic_sampling=True is not available with TRL: GRPOTrainer generates and "
                "scores one fixed batch of prompts per step and cannot draw more; use groupwise "
                "train with rollout.dynamic_sampling=true"
            )
        if uses_groupwise and self.mask_truncated_completions:
            raise ValueError(
                "mask_truncated_completions=True removes truncated completions' tokens from "
                "TRL's mask, so their l(q, o) (AMIR-GRPO's pairs, LENS's confidence) cannot be "
                "measured; it is not supported with amir or a non-'grpo' advantage_estimator"
            )

    def _check_gmpo(self) -> None:
        """gmpo=True replaces TRL's "grpo" clipped surrogate term by term: one line naming the
        first TRL option whose term would not be that surrogate."""
        if not self.gmpo:
            return
        conflicts = [
            ("loss_type", self.loss_type != "grpo", "'grpo' (GMPO's mean over completions)"),
            ("importance_sampling_level", self.importance_sampling_level != "token", "'token'"),
            (
                "use_vllm",
                self.use_vllm and self.vllm_importance_sampling_correction,
                "False or vllm_importance_sampling_correction=False",
            ),
            ("off_policy_mask_threshold", self.off_policy_mask_threshold is not None, "None"),
            ("delta", self.delta is not None, "None"),
        ]
        for name, conflict, wanted in conflicts:
            if conflict:
                raise ValueError(f"gmpo=True needs {name}={wanted}, got {getattr(self, name)!r}")

    def algorithm_options(self) -> AlgorithmOptions:
        """These options as groupwise's AlgorithmOptions (docs/algorithms.md §1-3), TRL's own
        options of the same meaning included (TRL_NATIVE)."""
        native = {name: getattr(self, trl) for name, trl in TRL_NATIVE.items()}
        native["policy_loss"] = self.loss_type if self.loss_type in ("cispo", "sapo") else "clip"
        if self.gmpo:
            native["policy_loss"] = "gmpo"
        if self.loss_type == "cispo" and self.epsilon_high is not None:
            native["cispo_eps_high"] = self.epsilon_high - 1.0
        else:
            del native["cispo_eps_high"]
        own = {name: getattr(self, trl) for name, trl in TRL_NAMES.items()}
        return AlgorithmOptions(**own, **native)


OWN_PREFIXES = ("correctness_", "log_rollouts")
"""GroupwiseGRPOConfig's own options outside AlgorithmOptions (besides gmpo), by prefix."""


def _docstring() -> str:
    lines = [
        GroupwiseGRPOConfig.__doc__.split("The parameters below")[0].rstrip(),
        "",
        "Parameters:",
    ]
    by_trl = {trl: name for name, trl in TRL_NAMES.items()}
    for spec in GroupwiseGRPOConfig.__dataclass_fields__.values():
        if spec.name in by_trl or spec.name.startswith(OWN_PREFIXES) or spec.name == "gmpo":
            kind = type(spec.default).__name__ if spec.default is not None else "str or None"
            lines.append(f"    {spec.name} (`{kind}`, *optional*, defaults to `{spec.default!r}`):")
            lines.append(f"        {spec.metadata['help']}")
    return "\n".join(lines)


GroupwiseGRPOConfig.__doc__ = _docstring()
