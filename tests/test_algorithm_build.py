"""AlgorithmOptions.build: the one place where the algorithm options meet an engine.

Every check of the options against what an engine has (a correctness signal for LENS, an AMIR
margin some pair can exceed, a reference policy) runs there, and every engine builds through it:
our trainer (train.algorithm.build_algorithm) and the TRL adapter (GroupwiseGRPOTrainer).
"""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import pytest
import torch

from groupwise.algorithms import (
    AlgorithmOptions,
    GroupRewards,
    PairSettings,
    RewardFacts,
    get_advantage_estimator,
    group_targets,
)
from groupwise.config import ConfigError
from groupwise.train.config import Config
from groupwise.train.preflight import load_run_config

BINARY = RewardFacts([(0.0, 1.0)], [1.0], correct_reward=1.0)
NO_CORRECTNESS = RewardFacts([(0.0, 1.0)], [1.0], None, "set reward.correctness_component")
SRC = Path(__file__).resolve().parents[1] / "src" / "groupwise"


def named(option: str) -> str:
    return f"algorithm.{option}"


def test_build_says_what_the_engine_must_provide() -> None:
    grpo = AlgorithmOptions().build(BINARY, 8)
    assert (grpo.needs_reference, grpo.needs_rollout_logp, grpo.needs_correctness) == (
        False,
        False,
        False,
    )
    assert grpo.pair_settings is None and grpo.lambda_reg is None and grpo.pairless is None
    lens = AlgorithmOptions(advantage="lens").build(BINARY, 8)
    assert (lens.needs_rollout_logp, lens.needs_correctness) == (True, True)
    amir = AlgorithmOptions(amir=True, margin=0.5).build(BINARY, 8)
    assert amir.needs_rollout_logp and not amir.needs_reference
    assert amir.pair_settings == PairSettings(0.5, "all", None, 0.5)
    assert amir.lambda_reg.value == pytest.approx(0.01)
    with_ref = AlgorithmOptions(amir=True, margin=0.5, ref_free=False).build(BINARY, 8)
    assert with_ref.needs_reference
    assert AlgorithmOptions().build(BINARY, 8, kl_coef=0.1).needs_reference
    # the engine's GRPO std settings reach the estimator's settings
    settings = AlgorithmOptions().build(BINARY, 8, scale="none", std="population", eps=1e-6)
    assert (settings.advantage_settings.scale, settings.advantage_settings.std) == (
        "none",
        "population",
    )
    assert settings.advantage_settings.eps == 1e-6


def test_build_refuses_in_one_line_naming_the_option() -> None:
    with pytest.raises(ValueError, match=r"^algorithm.advantage=lens needs a binary correctness"):
        AlgorithmOptions(advantage="lens").build(NO_CORRECTNESS, 8, name=named)
    with pytest.raises(ValueError, match=r"^algorithm.margin=1 is not below 1, the largest gap"):
        AlgorithmOptions(amir=True, margin=1.0).build(BINARY, 8, name=named)
    # LENS widens the gap by correct_reward / G: 1.1 < 1 + 1/8 is reachable, 1.125 is not
    AlgorithmOptions(advantage="lens", amir=True, margin=1.1).build(BINARY, 8)
    with pytest.raises(ValueError, match="1.125"):
        AlgorithmOptions(advantage="lens", amir=True, margin=1.125).build(BINARY, 8)
    no_reference = "it needs model.lora=true"
    with pytest.raises(
        ValueError, match=r"^algorithm.ref_free=false needs a reference policy: it needs model"
    ):
        AlgorithmOptions(amir=True, margin=0.5, ref_free=False).build(
            BINARY, 8, name=named, no_reference=no_reference
        )
    with pytest.raises(ValueError, match=r"^a KL term needs a reference policy"):
        AlgorithmOptions().build(BINARY, 8, kl_coef=0.1, no_reference=no_reference)
    with pytest.raises(ValueError, match=r"^algorithm.beta_dpo must be > 0, got 0.0$"):
        AlgorithmOptions(beta_dpo=0.0).build(BINARY, 8, name=named)


def test_the_built_algorithm_computes_what_group_targets_computes() -> None:
    rewards = GroupRewards(
        torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]),
        torch.tensor([True, False, False, True, True, False]),
        3,
        correctness=torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]),
        mean_logp_old=torch.tensor([-0.5, -1.0, -2.0, -0.2, -0.3, -0.9]),
    )
    options = AlgorithmOptions(advantage="lens", amir=True, margin=0.5)
    algorithm = options.build(BINARY, 3)
    built = algorithm.targets(rewards)
    direct = group_targets(
        rewards,
        get_advantage_estimator("lens"),
        options.advantage_settings(),
        options.pair_settings(),
    )
    for field in ("advantages", "rewards", "chosen", "rejected", "coefficients"):
        torch.testing.assert_close(getattr(built, field), getattr(direct, field))
    assert built.num_pairs == 4  # each group: 2 x 1 correct-over-wrong pairs


def test_our_config_builds_through_the_same_checks() -> None:
    with pytest.raises(ConfigError, match=r"algorithm.advantage=lens needs a binary correctness"):
        load_run_config(None, ["algorithm.advantage=lens", "reward.weights={format: 1.0}"])
    with pytest.raises(ConfigError, match="algorithm.ref_free=false needs a reference policy"):
        load_run_config(
            None,
            ["algorithm.amir=true", "algorithm.ref_free=false", "model.lora=false"],
        )
    with pytest.raises(ConfigError, match="a KL term needs a reference policy"):
        load_run_config(None, ["algorithm.kl_coef=0.1", "model.lora=false"])


def test_questions_split_over_processes_and_minibatches_is_checked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ConfigError, match=r"processes \(3\) x algorithm.minibatches \(2\)"):
        load_run_config(None, ["rollout.questions_per_step=4", "algorithm.minibatches=2"])
    load_run_config(None, ["rollout.questions_per_step=6", "algorithm.minibatches=2"])


ASSEMBLY = {"adaptive_lambda", "pair_settings", "unreachable_margin", "PairlessWarning"}


def test_no_engine_assembles_the_algorithm_itself() -> None:
    # what build assembles (AMIR's pairs and lambda, the margin check, the pairless warning) is
    # called nowhere in the engines: they call AlgorithmOptions.build
    found = []
    for folder in ("train", "integrations"):
        for path in sorted((SRC / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call):
                    func = node.func
                    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    if name in ASSEMBLY:
                        found.append(f"{path.relative_to(SRC)}:{node.lineno} {name}")
    assert not found, "engines assembling the algorithm: " + "; ".join(found)


def _numeric(hint: typing.Any) -> bool:
    args = set(typing.get_args(hint)) - {type(None)}
    return hint in (int, float) or (bool(args) and args <= {int, float})


def _declared_configs() -> dict[str, type]:
    """Every configuration of groupwise, by the name a user sees it under."""
    from groupwise.evaluation import EvalConfig
    from groupwise.sft import SFTSettings

    sections = {s.name: s.default_factory for s in dataclasses.fields(Config)}
    return {**sections, "EvalConfig": EvalConfig, "SFTSettings": SFTSettings}


def test_every_option_of_every_config_has_a_doc_and_a_range_or_a_type() -> None:
    missing = []
    for where, cls in _declared_configs().items():
        hints = typing.get_type_hints(cls)
        for spec in dataclasses.fields(cls):
            key = f"{where}.{spec.name}"
            if not spec.metadata.get("doc"):
                missing.append(f"{key}: no doc")
            # a number is either range-checked or any value of its type (a seed)
            unbounded = spec.name == "seed"
            if _numeric(hints[spec.name]) and not unbounded and spec.metadata.get("check") is None:
                missing.append(f"{key}: a number without a range")
            if spec.metadata.get("check") is not None and not spec.metadata.get("valid"):
                missing.append(f"{key}: a range without words")
    assert not missing, "; ".join(missing)


def test_evals_flags_are_generated_from_its_configs_fields() -> None:
    import argparse

    from groupwise.evaluation import EvalConfig
    from groupwise.evaluation.command import FLAGS, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    by_dest = {action.dest: action for action in parser._actions}
    for spec in dataclasses.fields(EvalConfig):
        action = by_dest[spec.name]  # every field is a flag, and sets that field
        assert FLAGS[spec.name] in action.option_strings
        assert action.help == spec.metadata["doc"]
    # a flag's text becomes the field's type; a flag not given leaves presets their say
    args = parser.parse_args(["--output", "o", "--k", "1,4", "--n", "4", "--stop", "END"])
    assert (args.ks, args.n, args.stop, args.temperature) == ((1, 4), 4, ["END"], None)
    assert (args.engine, args.dtype, args.seed) == ("transformers", "float32", 0)


def test_a_plugin_can_register_the_estimator_the_config_names() -> None:
    config = load_run_config(
        None, ["reward.plugins=[reward_plugin]", "algorithm.advantage=plugin_centered"]
    )
    algorithm = config.algorithm.build(BINARY, 2)
    rewards = GroupRewards(torch.tensor([1.0, 0.0, 3.0, 1.0]), torch.zeros(4, dtype=bool), 2)
    assert algorithm.targets(rewards).advantages.tolist() == [0.5, -0.5, 1.0, -1.0]
