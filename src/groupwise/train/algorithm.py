"""The algorithm of a run (`build_algorithm`): what `AlgorithmOptions.build` makes of the config,
for the trainer to run and for train.config_checks to check before anything loads."""

from __future__ import annotations

from groupwise.algorithms import Algorithm, RewardFacts
from groupwise.config import ConfigError
from groupwise.rewards import get_component
from groupwise.train.config import Config, RewardConfig


def build_algorithm(config: Config) -> Algorithm:
    """The algorithm our trainer runs (groupwise.algorithms.AlgorithmOptions.build: the checks
    of the correctness signal, the AMIR margin and the reference policy run there), from the
    reward components' declared bounds and the trainer's GRPO settings; ConfigError naming the
    option otherwise. docs/algorithms.md §1-3."""
    reward, algo = config.reward, config.algorithm
    components = [get_component(name) for name in reward.weights]
    overlong = [((-1.0, 0.0), reward.overlong_penalty)] if reward.overlong_buffer else []
    facts = RewardFacts(
        ranges=[part.bounds for part in components] + [bounds for bounds, _ in overlong],
        weights=[reward.weights[part.name] for part in components] + [w for _, w in overlong],
        correct_reward=_correct_reward(reward),
        correctness_hint=(
            f"it calibrates reward component '{reward.correctness_component}' "
            "(reward.correctness_component), which is not in reward.weights "
            f"{sorted(reward.weights)}"
        ),
    )
    try:
        return algo.build(
            facts,
            config.rollout.group_size,
            name=lambda option: f"algorithm.{option}",
            kl_coef=algo.kl_coef,
            no_reference=None
            if config.model.lora
            else "it needs model.lora=true: the reference is the same model with the adapter "
            "disabled",
            scale=algo.scale_rewards,
            std=algo.advantage_std,
            eps=algo.advantage_eps,
            ratio_level=algo.loss_level,
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _correct_reward(reward: RewardConfig) -> float | None:
    """What the correctness component adds for a correct answer (weight x its correct value);
    None when it is not among the weighted components."""
    component = reward.correctness_component
    if component not in reward.weights:
        return None
    return reward.weights[component] * get_component(component).correct_value
