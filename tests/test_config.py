"""Config: YAML presets load, overrides apply, bad input names the key and the valid choices."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupwise.train.config import Config, ConfigError, load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PRESETS = sorted(CONFIGS.glob("*.yaml"))


def test_presets_exist() -> None:
    names = {p.stem for p in PRESETS}
    assert {
        "grpo_gsm8k",
        "amir_grpo_gsm8k",
        "lens_math",
        "gspo_gsm8k",
        "amir_lens_gsm8k",
        "quickstart",
    } <= names


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_preset_loads(preset: Path) -> None:
    config = load_config(preset)
    assert isinstance(config, Config)


def test_paper_settings_of_amir_preset() -> None:
    c = load_config(CONFIGS / "amir_grpo_gsm8k.yaml")
    assert (c.rollout.group_size, c.optim.lr, c.model.lora_r, c.model.lora_alpha) == (
        8,
        5e-6,
        16,
        16,
    )
    assert (c.algorithm.amir, c.algorithm.beta_dpo, c.algorithm.margin) == (True, 0.5, 2.0)
    assert c.train.max_steps == 1000 and c.data.prompt == "amir"
    assert (c.optim.weight_decay, c.optim.beta2, c.optim.max_grad_norm) == (0.1, 0.99, 0.1)


def test_paper_settings_of_lens_preset() -> None:
    c = load_config(CONFIGS / "lens_math.yaml")
    assert (c.rollout.group_size, c.rollout.questions_per_step) == (16, 32)
    assert c.reward.weights == {"binary": 1.0}
    assert (c.rollout.temperature, c.algorithm.lens_alpha, c.optim.lr) == (1.0, 0.25, 1e-6)
    assert c.algorithm.kl_coef == 0.0 and c.algorithm.advantage == "lens"


def test_gspo_preset_uses_tight_clip() -> None:
    c = load_config(CONFIGS / "gspo_gsm8k.yaml")
    assert c.algorithm.loss_level == "sequence"
    assert (c.algorithm.eps_low, c.algorithm.eps_high) == (3e-4, 4e-4)


def test_overrides_parse_values_as_yaml() -> None:
    c = load_config(
        CONFIGS / "quickstart.yaml",
        [
            "model.name=tiny-random",
            "train.max_steps=2",
            "optim.lr=1e-3",
            "algorithm.amir=false",
            "data.options={level: easy}",
            "algorithm.max_pairs_per_group=3",
        ],
    )
    assert c.model.name == "tiny-random" and c.train.max_steps == 2
    assert c.optim.lr == pytest.approx(1e-3) and c.algorithm.amir is False
    assert c.data.options == {"level": "easy"} and c.algorithm.max_pairs_per_group == 3


def test_int_is_accepted_for_float_and_stored_as_float() -> None:
    c = load_config(None, ["optim.lr=1"])
    assert isinstance(c.optim.lr, float)


def test_unknown_key_names_the_valid_keys() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm.betta_dpo'.*beta_dpo"):
        load_config(None, ["algorithm.betta_dpo=0.3"])
    with pytest.raises(ConfigError, match=r"unknown key 'trian'.*train"):
        load_config(None, ["trian.max_steps=3"])


def test_bad_choice_names_the_valid_choices() -> None:
    with pytest.raises(ConfigError, match=r"algorithm.aggregation.*'mean'.*grpo, dapo, dr_grpo"):
        load_config(None, ["algorithm.aggregation=mean"])
    with pytest.raises(ConfigError, match=r"algorithm.lens_mode.*full, mixed_only, negative_only"):
        load_config(None, ["algorithm.lens_mode=both"])


def test_bad_types_are_rejected() -> None:
    with pytest.raises(ConfigError, match="train.max_steps: expected an integer"):
        load_config(None, ["train.max_steps=ten"])
    with pytest.raises(ConfigError, match="model.lora: expected true or false"):
        load_config(None, ["model.lora=3"])
    with pytest.raises(ConfigError, match="override 'oops' must look like key.sub=value"):
        load_config(None, ["oops"])


def test_cross_field_checks() -> None:
    with pytest.raises(ConfigError, match="group_size must be >= 2"):
        load_config(None, ["rollout.group_size=1"])
    with pytest.raises(ConfigError, match="needs model.lora=true"):
        load_config(None, ["algorithm.kl_coef=0.1", "model.lora=false"])
    with pytest.raises(ConfigError, match="calibrates reward component 'correctness'"):
        load_config(None, ["algorithm.advantage=lens", "reward.weights={binary: 1.0}"])


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  group_size: [\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("rollout:\n  group_sise: 4\n")
    with pytest.raises(ConfigError, match=r"typo.yaml: unknown key 'rollout.group_sise'"):
        load_config(typo)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
