"""GroupwiseGRPOTrainer as a TRL user meets it: no silent no-op, the rollout log-probs TRL's loss
uses, no crash where TRL goes on, lambda's bounds said, TRL's names and silence.

Each test names the finding it pins:
1. an AMIR margin that cannot mine a pair is refused when knowable, else warned about once;
2. LENS and AMIR read the old policy TRL's loss uses, never sampling log-probs TRL ignores;
3. completions whose reward functions all return None get no advantage and no pair;
4. lambda sitting at a bound is said, once;
5. TRL-style option names; with AMIR and LENS off the trainer is TRL's, silent.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path

import pytest
import torch
import trl_support as fx  # imports TRL: a CI dependency, so these tests never skip
from trl import GRPOTrainer

from groupwise.algorithms import AlgorithmOptions
from groupwise.algorithms import options as built_algorithm  # Algorithm.targets calls it
from groupwise.algorithms.options import option_fields
from groupwise.integrations.trl import GroupwiseGRPOConfig, reward_functions
from groupwise.integrations.trl.config import NOT_IN_TRL, TRL_NAMES, TRL_NATIVE

ONE_MICRO_BATCH = {"per_device_train_batch_size": 12, "gradient_accumulation_steps": 1}


def binary(prompts, completions, completion_ids, **_):
    """A plain 0/1 accuracy reward, as TRL users write them (no declared range)."""
    return fx.correct(prompts, completions, completion_ids)


# ---------------------------------------------------------------------------------------------
# 1. AMIR that silently does nothing


def test_a_margin_above_a_known_reward_range_is_refused_when_the_trainer_is_built(
    tmp_path: Path,
) -> None:
    # the correctness reward named, 0 or 1: no two rewards differ by more than 1
    with pytest.raises(ValueError, match=r"amir_margin=1 is not below 1, the largest gap"):
        fx.trainer(tmp_path, reward_funcs=[fx.correct], amir=True, amir_margin=1.0)
    # under LENS a wrong answer's reward reaches -1/G: the gap is 1 + 1/4
    with pytest.raises(ValueError, match=r"amir_margin=1.25 is not below 1.25"):
        fx.trainer(
            tmp_path,
            reward_funcs=[fx.correct],
            amir=True,
            amir_margin=1.25,
            advantage_estimator="lens",
        )
    fx.trainer(
        tmp_path, reward_funcs=[fx.correct], amir=True, amir_margin=1.2, advantage_estimator="lens"
    )
    # groupwise's reward functions declare their ranges: the default margin 2.0 with binary
    funcs, weights = reward_functions({"binary": 1.0})
    with pytest.raises(ValueError, match=r"amir_margin=2 is not below 1"):
        fx.trainer(
            tmp_path,
            reward_funcs=funcs,
            amir=True,
            amir_margin=2.0,
            correctness_reward=None,
            reward_weights=weights,
        )


def test_a_margin_that_mines_no_pair_is_warned_about_once(tmp_path: Path) -> None:
    # an unnamed 0/1 reward has no known range: the trainer builds, and the first generation
    # batch with groups whose rewards differ (group 0: 1 0 0 1) and no pair says so
    built, _, _ = fx.trainer(
        tmp_path,
        reward_funcs=[binary],
        amir=True,
        amir_margin=2.0,
        correctness_reward=None,
        max_steps=2,
        **ONE_MICRO_BATCH,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built.train()
    said = [str(w.message) for w in caught if "mined no preference pair" in str(w.message)]
    assert len(said) == 1
    assert "1 group(s) whose rewards differ" in said[0] and "amir_margin=2" in said[0]
    assert [e["amir/pairs"] for e in built.state.log_history if "amir/pairs" in e] == [0.0, 0.0]


# ---------------------------------------------------------------------------------------------
# 2. The rollout log-probs: what TRL's loss uses as the old policy


def placeholder_rollout(prompts, trainer):
    """A rollout_func returning the fixed completions with placeholder log-probs (all 0)."""
    tokenizer = trainer.processing_class
    start = trainer.accelerator.process_index * len(prompts)
    completions = [
        list(fx.COMPLETIONS[(start + r) % len(fx.COMPLETIONS)]) for r in range(len(prompts))
    ]
    return {
        "prompt_ids": [tokenizer(text=p)["input_ids"] for p in prompts],
        "completion_ids": completions,
        "logprobs": [[0.0] * len(c) for c in completions],
    }


@pytest.mark.parametrize("layout", [ONE_MICRO_BATCH, {}], ids=["one micro-batch", "two"])
def test_placeholder_sampling_logprobs_are_not_the_old_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: dict
) -> None:
    used = []
    core = built_algorithm.group_targets
    monkeypatch.setattr(
        built_algorithm,
        "group_targets",
        lambda rewards, *a, **k: used.append(rewards.mean_logp_old) or core(rewards, *a, **k),
    )
    model, tokenizer = fx.tiny_model()
    built = fx.OldPolicyRecorder(
        model=model,
        reward_funcs=[fx.correct, fx.bonus],
        train_dataset=fx.dataset(),
        args=fx.config(tmp_path, advantage_estimator="lens", amir=True, **layout),
        processing_class=tokenizer,
        rollout_func=placeholder_rollout,
    )
    built.train()
    (mean_logp_old,) = used
    by_row = {
        row: mean
        for rows, means, _ in built.old_policy
        for row, mean in zip(rows, means, strict=True)
    }
    assert sorted(by_row) == list(range(12))
    trl_old = torch.tensor([by_row[row] for row in range(12)])
    torch.testing.assert_close(mean_logp_old, trl_old, atol=1e-5, rtol=1e-5)
    assert bool((mean_logp_old < -0.1).all())  # the placeholders (0) would say certainty


# ---------------------------------------------------------------------------------------------
# 3. None rewards: no crash, no advantage, no pair


def correct_or_none(prompts, completions, completion_ids, **_):
    values = fx.correct(prompts, completions, completion_ids)
    return [
        None if fx.ROW[tuple(ids)] == 0 else v
        for ids, v in zip(completion_ids, values, strict=True)
    ]


def bonus_or_none(prompts, completions, completion_ids, **_):
    values = fx.bonus(prompts, completions, completion_ids)
    return [
        None if fx.ROW[tuple(ids)] == 0 else v
        for ids, v in zip(completion_ids, values, strict=True)
    ]


def test_a_completion_without_any_reward_leaves_its_group_out(tmp_path: Path) -> None:
    correct_or_none.__name__, bonus_or_none.__name__ = "correct", "bonus"
    built, _, _ = fx.trainer(
        tmp_path,
        reward_funcs=[correct_or_none, bonus_or_none],
        amir=True,
        advantage_estimator="lens",
        **ONE_MICRO_BATCH,
    )
    built.train()  # TRL goes on; so does the adapter
    (seen,) = built.seen
    by_row = dict(zip(seen["rows"], seen["advantages"].tolist(), strict=True))
    coefficients = dict(zip(seen["rows"], seen["coefficients"].tolist(), strict=True))
    assert [by_row[r] for r in range(4)] == [0.0] * 4  # group 0 holds row 0
    assert [coefficients[r] for r in range(4)] == [0.0] * 4  # and forms no pair
    assert any(by_row[r] != 0 for r in range(4, 12))
    assert any(coefficients[r] != 0 for r in range(4, 12))


def test_lens_refuses_a_groupwise_reward_that_is_not_a_correctness_reward(tmp_path: Path) -> None:
    funcs, weights = reward_functions({"format": 1.0, "binary": 1.0})
    with pytest.raises(ValueError, match=r"reward function 'format' is not a correctness reward"):
        fx.trainer(
            tmp_path,
            reward_funcs=funcs,
            reward_weights=weights,
            correctness_reward="format",
            advantage_estimator="lens",
        )
    with pytest.raises(
        ValueError,
        match=r"'binary' returns 1 for a correct answer, but "
        r"correctness_value=2",
    ):
        fx.trainer(
            tmp_path,
            reward_funcs=funcs,
            reward_weights=weights,
            correctness_reward="binary",
            correctness_value=2.0,
            advantage_estimator="lens",
        )


# ---------------------------------------------------------------------------------------------
# 4. Lambda at its floor in TRL's default layout


def test_lambda_at_its_floor_is_said_once(tmp_path: Path) -> None:
    # one micro-batch per generation batch: it is on-policy and holds whole groups, so L_GRPO
    # is about 0 and the official ratio sends lambda to its floor (0.01 -> 0.008 -> 0.0064 ->
    # 0.005), then keeps it there
    steps = 24
    built, _, _ = fx.trainer(tmp_path, amir=True, max_steps=steps, **ONE_MICRO_BATCH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built.train()
    said = [str(w.message) for w in caught if "sat at its floor" in str(w.message)]
    lambdas = [e["amir/lambda"] for e in built.state.log_history if "amir/lambda" in e]
    assert lambdas[:4] == pytest.approx([0.008, 0.0064, 0.00512, 0.005])
    assert lambdas[3:] == [0.005] * (steps - 3)
    assert len(said) == 1 and "20 consecutive updates" in said[0] and "L_GRPO" in said[0]


# ---------------------------------------------------------------------------------------------
# 5. TRL's conventions


def test_every_shared_option_has_its_trl_name_and_default() -> None:
    config_fields = {f.name: f for f in dataclasses.fields(GroupwiseGRPOConfig)}
    # TRL's own options where TRL has one (TRL_NATIVE), none where TRL cannot do it
    exposed = set(TRL_NAMES) | set(TRL_NATIVE) | set(NOT_IN_TRL)
    assert set(option_fields()) - exposed == {"lambda_every"}  # it paces lambda_measure="grad"
    for name, trl_name in TRL_NAMES.items():
        assert config_fields[trl_name].default == option_fields()[name].default, name
        assert option_fields()[name].metadata["doc"] in config_fields[trl_name].metadata["help"]
    prefixed = [t for n, t in TRL_NAMES.items() if n not in ("advantage", "amir")]
    assert all(t.startswith(("amir_", "lens_", "gmpo_")) for t in prefixed)
    args = GroupwiseGRPOConfig(
        output_dir="x",
        use_cpu=True,
        report_to=[],
        amir=True,
        amir_margin=0.3,
        amir_beta=0.2,
        advantage_estimator="lens",
    )
    assert args.algorithm_options() == AlgorithmOptions(
        amir=True, margin=0.3, beta_dpo=0.2, advantage="lens"
    )


def non_binary(prompts, completions, completion_ids, **_):
    return [0.5 * len(ids) for ids in completion_ids]


class PlainTRL(fx.FixedCompletions, GRPOTrainer):
    """TRL's own GRPOTrainer on the fixed batch."""


def test_with_amir_and_lens_off_the_trainer_is_trls_and_silent(tmp_path: Path) -> None:
    # a non-binary reward named as the correctness reward: nothing to check, nothing to say
    logs, said = {}, {}
    for name, cls, args in [
        (
            "groupwise",
            fx.Recording,
            fx.config(tmp_path / "g", correctness_reward="non_binary", **ONE_MICRO_BATCH),
        ),
        ("trl", PlainTRL, fx.trl_config(tmp_path / "t", **ONE_MICRO_BATCH)),
    ]:
        built, _, _ = fx.trainer(tmp_path / name, cls=cls, reward_funcs=[non_binary], args=args)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            built.train()
        logs[name] = next(e for e in built.state.log_history if "loss" in e)
        said[name] = {str(w.message) for w in caught}
    assert said["groupwise"] <= said["trl"]
    assert sorted(logs["groupwise"]) == sorted(logs["trl"])
    assert logs["groupwise"]["loss"] == logs["trl"]["loss"]
    assert math.isfinite(logs["groupwise"]["loss"])
