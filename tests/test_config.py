"""Config: YAML presets load, overrides apply, bad input names the key and the valid choices;
what depends on the machine or the plugins is refused at preflight, not when a file loads."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from groupwise.config import ConfigError
from groupwise.train.config import Config
from groupwise.train.config_file import load_config
from groupwise.train.preflight import load_run_config, preflight

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
        "quickstart_gsm8k",
    } <= names


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_preset_loads(preset: Path) -> None:
    config = load_config(preset)
    assert isinstance(config, Config)


def test_paper_settings_of_amir_preset() -> None:
    """docs/algorithms.md §2: paper and official-code defaults, item by item."""
    c = load_config(CONFIGS / "amir_grpo_gsm8k.yaml")
    assert (c.rollout.group_size, c.rollout.questions_per_step) == (8, 4)
    assert (c.optim.lr, c.model.lora, c.model.lora_r, c.model.lora_alpha) == (5e-6, True, 16, 16)
    assert c.model.lora_target_modules == "all-linear" and c.rollout.max_new_tokens == 1024
    assert (c.algorithm.eps_low, c.algorithm.eps_high, c.algorithm.kl_coef) == (0.2, 0.2, 0.0)
    assert (c.algorithm.amir, c.algorithm.beta_dpo, c.algorithm.margin) == (True, 0.5, 2.0)
    assert (c.algorithm.pair_mode, c.algorithm.ref_free, c.algorithm.lambda_measure) == (
        "all",
        True,
        "loss",
    )
    a = c.algorithm
    assert (a.lambda_init, a.lambda_low, a.lambda_high, a.lambda_up, a.lambda_down) == (
        0.01,
        0.30,
        0.70,
        1.25,
        0.8,
    )
    assert (a.lambda_min, a.lambda_max, a.advantage_std) == (0.005, 0.05, "unbiased")
    assert c.train.max_steps == 1000 and c.data.prompt == "amir" and c.data.benchmark == "gsm8k"
    assert (c.optim.weight_decay, c.optim.beta1, c.optim.beta2) == (0.1, 0.9, 0.99)
    assert (c.optim.max_grad_norm, c.optim.warmup_ratio, c.optim.schedule) == (0.1, 0.1, "cosine")
    # the official reward: correctness 2.0 / 0 read as the official code reads it, the
    # line-anchored format, the integer reward for any number, tag count, calibration, and the
    # expression reward (+0.1 per correct "a OP b = c"), as groupwise.rewards.AMIR_GRPO_WEIGHTS
    assert c.reward.checking == "amir_official"
    assert c.reward.weights == {
        "correctness": 1.0,
        "expression_official": 1.0,
        "format_official": 1.0,
        "integer_official": 1.0,
        "tag_count": 1.0,
        "calibration_official": 1.0,
    }


def test_paper_settings_of_lens_preset() -> None:
    """docs/algorithms.md §3: paper values, and verl's defaults where the paper states none."""
    c = load_config(CONFIGS / "lens_math.yaml")
    assert (c.rollout.group_size, c.rollout.questions_per_step, c.algorithm.minibatches) == (
        16,
        128,
        4,
    )
    assert c.rollout.questions_per_step // c.algorithm.minibatches == 32  # 512 per update
    assert c.algorithm.num_iterations == 1 and c.model.lora is False
    assert c.reward.weights == {"binary": 1.0} and c.reward.checking == "math_verify"
    assert (c.rollout.temperature, c.rollout.top_p, c.rollout.max_new_tokens) == (1.0, 1.0, 4096)
    assert (c.algorithm.lens_alpha, c.algorithm.lens_mode, c.optim.lr) == (0.25, "full", 1e-6)
    assert (c.algorithm.eps_low, c.algorithm.eps_high) == (0.2, 0.2)
    assert c.algorithm.kl_coef == 0.0 and c.algorithm.advantage == "lens"
    assert (c.optim.weight_decay, c.optim.beta1, c.optim.beta2) == (0.01, 0.9, 0.999)
    assert (c.optim.max_grad_norm, c.optim.warmup_ratio, c.optim.schedule) == (1.0, 0.0, "constant")
    assert c.data.mix == [
        {"benchmark": "math", "split": "train"},
        {"benchmark": "dapo_math_17k", "split": "train", "size": 17500, "seed": 0},
    ]


def test_the_lens_preset_names_the_missing_dapo_file(tmp_path: Path) -> None:
    """Offline, DAPO-Math-17k is absent: the run stops naming the file, it never trains on
    MATH alone."""
    from groupwise.train.run_folder import RunFolder
    from groupwise.train.trainer import Trainer

    data = tmp_path / "data"
    (data / "math").mkdir(parents=True)
    (data / "math" / "train.jsonl").write_text(
        '{"problem": "1+1?", "solution": "\\\\boxed{2}", "level": "Level 1", "type": "x"}\n'
    )
    config = load_run_config(
        CONFIGS / "lens_math.yaml",
        [f"data.data_dir={data}", "model.name=tiny-random", f"train.output_dir={tmp_path / 'r'}"],
    )
    with pytest.raises(Exception, match=r"dapo_math_17k.*train\.jsonl"):
        Trainer(config)
    # the failed start released the run folder's lock
    RunFolder.open(tmp_path / "r", config, "overwrite").close()


def test_data_mix_and_checking_are_validated() -> None:
    mix = ["data.mix=[{benchmark: gsm8k, split: train, size: 5}, {benchmark: math500}]"]
    loaded = load_run_config(None, mix).data.mix[0]
    assert loaded == {"benchmark": "gsm8k", "split": "train", "size": 5}
    bad = {
        "data.mix=[{benchmark: gsm8k, sise: 5}]": r"data.mix\[0\]: unknown key\(s\) \['sise'\]",
        "data.mix=[{benchmark: gsm8k}, {benchmark: math, split: dev}]": (
            r"data.mix\[1\].split: benchmark 'math' has no split 'dev'"
        ),
        "data.mix=[{benchmark: gsm8k, options: {level: easy}}]": (
            r"data.mix\[0\].options: unknown option 'level'"
        ),
        "reward.checking=strict": r"reward.checking: unknown checking mode 'strict'",
    }
    for override, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_run_config(None, [override])
    with pytest.raises(ConfigError, match="data.mix replaces data.benchmark"):
        load_config(None, [*mix, "data.benchmark=math"])


def test_gspo_preset_uses_tight_clip() -> None:
    c = load_config(CONFIGS / "gspo_gsm8k.yaml")
    assert c.algorithm.loss_level == "sequence"
    assert (c.algorithm.eps_low, c.algorithm.eps_high) == (3e-4, 4e-4)


def test_overrides_parse_values_as_yaml() -> None:
    c = load_config(
        CONFIGS / "quickstart_gsm8k.yaml",
        [
            "model.name=tiny-random",
            "train.max_steps=2",
            "optim.lr=1e-3",
            "algorithm.amir=false",
            "data.benchmark=arith",  # a benchmark with options
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
        load_run_config(None, ["algorithm.kl_coef=0.1", "model.lora=false"])
    with pytest.raises(ConfigError, match="calibrates reward component 'correctness'"):
        load_run_config(None, ["algorithm.advantage=lens", "reward.weights={binary: 1.0}"])


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


# --- every value checked at load, before any model or data; the machine's side at preflight ----

BAD_VALUES = [
    (["rollout.temperature=0"], "rollout.temperature must be > 0 (training scores"),
    (["reward.timeout=0"], "reward.timeout must be > 0 seconds, got 0.0"),
    (["reward.workers=0"], "reward.workers must be >= 1, got 0"),
    (
        ["data.prompt=chat"],
        "data.prompt: invalid value 'chat'; valid choices: amir, amir_groupwise, boxed, brief, "
        "gsm8k",
    ),
    (["model.device=gpu"], "model.device: invalid value 'gpu'; valid: auto, cpu, cuda, cuda:N"),
    (["model.lora_target_modules="], "model.lora_target_modules is empty"),
    (["model.lora_target_modules=(q_proj"], "'(q_proj' is not a regular expression"),
    (["data.limit=0"], "data.limit must be >= 1 (or null: every problem), got 0"),
    (["algorithm.eps_low=0"], "algorithm.eps_low must be in (0, 1), got 0.0"),
    (["algorithm.eps_low=1.5"], "algorithm.eps_low must be in (0, 1), got 1.5"),
    (["algorithm.eps_high=-0.1"], "algorithm.eps_high must be >= 0, got -0.1"),
    (["algorithm.beta_dpo=0"], "algorithm.beta_dpo must be > 0, got 0.0"),
    (["algorithm.lens_alpha=-0.25"], "algorithm.lens_alpha must be >= 0, got -0.25"),
    (
        ["algorithm.lambda_init=0.1"],
        "lambda_init must lie in [algorithm.lambda_min, algorithm.lambda_max] = "
        "[0.005, 0.05], got 0.1",
    ),
    (["algorithm.lambda_low=0.8"], "lambda_low must be < algorithm.lambda_high, got 0.8 and 0.7"),
    (["optim.max_grad_norm=0"], "optim.max_grad_norm must be > 0, got 0.0"),
    (["optim.lr=.nan"], "optim.lr must be a finite number, got nan"),
    (["reward.weights={correctness: .inf}"], "reward.weights.correctness must be a finite"),
    (["train.output_dir="], "train.output_dir is empty"),
    (["train.output_dir=  "], "train.output_dir is empty"),
]


@pytest.mark.parametrize(
    ("overrides", "message"), BAD_VALUES, ids=[" ".join(o) for o, _ in BAD_VALUES]
)
def test_bad_values_are_refused_at_load_naming_key_and_range(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)
    assert message in str(caught.value)


# What this machine has, and the names that registries resolve (reward.plugins extend them):
# loading passes, preflight refuses.
AT_PREFLIGHT = [
    (["model.device=cuda:99"], "model.device=cuda:99, but this machine has"),
    (
        ["data.benchmark=arith", "data.options={levl: easy}"],
        "data.options: unknown option 'levl' for benchmark 'arith'; valid options: level, size",
    ),
    (["data.options={level: easy}"], "for benchmark 'gsm8k'; valid options: none"),
    (["data.benchmark=gsm9k"], "data.benchmark: unknown benchmark 'gsm9k'"),
    (["data.split=validation"], "data.split: benchmark 'gsm8k' has no split 'validation'"),
    (["reward.weights={correctnes: 1}"], "reward.weights: unknown component 'correctnes'"),
    (["reward.plugins=[no_such_plugin]"], "reward.plugins: cannot import 'no_such_plugin'"),
    (
        [
            "algorithm.advantage=lens",
            "reward.weights={format: 1}",
            "reward.correctness_component=format",
        ],
        "reward.correctness_component: reward component 'format' is not a correctness reward",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "message"), AT_PREFLIGHT, ids=[" ".join(o) for o, _ in AT_PREFLIGHT]
)
def test_names_and_the_machine_are_refused_at_preflight_naming_the_key(
    overrides: list[str], message: str
) -> None:
    load_config(None, overrides)
    with pytest.raises(ConfigError) as caught:
        load_run_config(None, overrides)
    assert message in str(caught.value)


def test_a_yaml_that_is_not_a_mapping_is_refused_also_with_overrides(tmp_path: Path) -> None:
    listed = tmp_path / "list.yaml"
    listed.write_text("- model\n- train\n")
    for overrides in ([], ["train.max_steps=2"]):
        with pytest.raises(ConfigError, match=r"list.yaml: expected a mapping of sections"):
            load_config(listed, overrides)
    scalar = tmp_path / "zero.yaml"
    scalar.write_text("0\n")  # was read as "no settings": every default, silently
    with pytest.raises(ConfigError, match=r"zero.yaml: expected a mapping of sections.*int"):
        load_config(scalar)


def test_a_section_set_to_a_scalar_is_refused(tmp_path: Path) -> None:
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("train: 0\n")  # was read as an empty section
    with pytest.raises(ConfigError, match="scalar.yaml: train: expected a mapping of options, got"):
        load_config(scalar)
    with pytest.raises(ConfigError, match="'train' is not a section"):
        load_config(scalar, ["train.max_steps=3"])
    with pytest.raises(ConfigError, match="model: expected a mapping of options, got 'tiny-"):
        load_config(None, ["model=tiny-random"])
    empty = tmp_path / "empty_section.yaml"
    empty.write_text("train:\n")
    assert load_config(empty, ["train.max_steps=3"]).train.max_steps == 3


def test_a_non_utf8_config_names_the_file_and_line(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.yaml"
    text = "model:\n  name: tiny-random\ntrain:\n  output_dir: runs/caf\xe9\n"
    latin1.write_bytes(text.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1.yaml line 4: not UTF-8 \(byte 0xe9\)"):
        load_config(latin1)


@dataclasses.dataclass
class _Inner:
    k: tuple[int, ...] = (1,)


@dataclasses.dataclass
class _Outer:
    mode: typing.Literal["a", "b"] = "a"
    rate: float = 1.0
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    names: dict[str, float] | None = None


def test_typed_config_coerces_every_annotated_type() -> None:
    from groupwise.config import build

    built = build(_Outer, {"mode": "b", "rate": "1e-6", "inner": {"k": [2, 3]}, "names": {"x": 1}})
    assert built == _Outer("b", 1e-6, _Inner((2, 3)), {"x": 1.0})
    assert build(_Outer, {"inner": None}).inner == _Inner()  # an empty section: its defaults
    for data, message in [
        ({"mode": "c"}, "mode: invalid value 'c'; valid choices: a, b"),
        ({"inner": {"k": [1, "x"]}}, r"inner.k\[1\]: expected an integer, got 'x'"),
        ({"names": [1]}, "names: expected a mapping, got \\[1\\]"),
        ({"nope": 1}, "unknown key 'nope'; valid keys here: mode, rate, inner, names"),
    ]:
        with pytest.raises(ConfigError, match=message):
            build(_Outer, data)


def test_a_wrong_literal_choice_suggests_the_closest_valid_one() -> None:
    from groupwise.config import build, closest

    assert closest("rlo", ["grpo", "lens", "rloo"]) == "rloo"
    assert closest("xyz", ["grpo", "lens"]) is None
    assert closest(16, [8, 16.0]) == "16.0"  # compared as text: choices of any type
    with pytest.raises(ConfigError) as raised:
        load_run_config(None, ["rollout.engine=vlm"])
    assert str(raised.value) == (
        "command line, override 'rollout.engine=vlm': rollout.engine: invalid value 'vlm' "
        "(did you mean 'vllm'?); valid choices: transformers, vllm, auto"
    )
    with pytest.raises(ConfigError) as raised:
        load_run_config(None, ["algorithm.lens_mode=mixed"])
    assert str(raised.value).endswith(
        "algorithm.lens_mode: invalid value 'mixed' (did you mean 'mixed_only'?); valid "
        "choices: full, mixed_only, negative_only"
    )
    with pytest.raises(ConfigError, match=r"^mode: invalid value 'c'; valid choices: a, b$"):
        build(_Outer, {"mode": "c"})  # nothing close: no guess


def test_rollout_engine_auto_is_vllm_where_installed_and_one_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    for installed, processes, expected in (
        (True, "1", "vllm"),
        (True, "2", "transformers"),  # one engine per training process only
        (False, "1", "transformers"),
    ):

        def find_spec(name: str, *args: Any, has: bool = installed) -> Any:
            return (object() if has else None) if name == "vllm" else real(name, *args)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
        monkeypatch.setenv("WORLD_SIZE", processes)
        questions = ["rollout.questions_per_step=4"]  # a multiple of 2 processes
        loaded = load_config(CONFIGS / "quickstart_gsm8k.yaml", questions)
        assert loaded.rollout.engine == "auto"  # loading a file reads no machine
        assert preflight(loaded).rollout.engine == expected, (installed, processes)
    # the GSM8K presets choose it; without vLLM (this environment) they train on transformers
    monkeypatch.setattr(importlib.util, "find_spec", real)
    monkeypatch.setenv("WORLD_SIZE", "1")
    for preset in sorted(CONFIGS.glob("*_gsm8k.yaml")):
        raw = yaml.safe_load(preset.read_text())
        assert raw["rollout"]["engine"] == "auto", preset.name
        assert load_run_config(preset).rollout.engine == "transformers", preset.name


def test_sampling_ahead_becomes_serial_where_auto_finds_no_vllm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    preset = CONFIGS / "smollm2_arith.yaml"
    for installed, expected in ((True, (1, True)), (False, (0, False))):

        def find_spec(name: str, *args: Any, has: bool = installed) -> Any:
            return (object() if has else None) if name == "vllm" else real(name, *args)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
        monkeypatch.setenv("WORLD_SIZE", "1")
        rollout = load_run_config(preset).rollout
        assert (rollout.staleness, rollout.importance_correction) == expected, installed
    assert capsys.readouterr().out == (
        "groupwise train: rollout.engine=auto is transformers here, which samples from the "
        "policy itself: rollout.staleness=0, rollout.importance_correction=false\n"
    )
    # named, the engine is what the user asked for: refused, not changed
    with pytest.raises(ConfigError, match=r"it needs rollout.engine=vllm"):
        load_run_config(preset, ["rollout.engine=transformers"])


@pytest.mark.parametrize(("value", "engine_args"), [("null", None), ("false", False)])
def test_vllm_enforce_eager_reaches_the_engine_only_when_set(
    monkeypatch, value: str, engine_args: bool | None
) -> None:
    from groupwise.rollout import vllm_generator
    from groupwise.train.rollout_engine import build_generator

    seen: dict[str, Any] = {}

    class Recorder:  # VLLMGenerator's constructor, recorded instead of starting vLLM
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.update(kwargs)

    monkeypatch.setattr(vllm_generator, "VLLMGenerator", Recorder)
    config = load_config(
        "configs/quickstart_gsm8k.yaml",
        ["rollout.engine=vllm", f"rollout.vllm_enforce_eager={value}"],
    )
    build_generator(config, None, None)
    expected = None if engine_args is None else {"enforce_eager": engine_args}
    assert seen["engine_args"] == expected
    assert seen["memory"] == config.rollout.vllm_memory


def test_a_file_naming_cuda_or_vllm_loads_anywhere_and_preflight_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run's config.yaml loads on a machine without CUDA or vLLM (to read it, compare it,
    resume elsewhere); the run starts only where they are, refused in one line naming the key."""
    import importlib.util

    import torch

    from groupwise.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    cases = {
        "model:\n  device: cuda\n": (
            "model.device=cuda, but this machine has 0 CUDA device(s); use model.device=auto or cpu"
        ),
        "rollout:\n  engine: vllm\n": (
            "rollout.engine=vllm: the vllm engine needs vLLM, which is not installed here: "
            "pip install vllm (GPUs)"
        ),
    }
    for text, message in cases.items():
        path = tmp_path / "config.yaml"
        path.write_text(text)
        config = load_config(path)  # loading passes
        assert (config.model.device, config.rollout.engine) != ("auto", "transformers")
        with pytest.raises(ConfigError) as caught:
            preflight(config)
        assert str(caught.value).startswith(message)
        with pytest.raises(ConfigError) as caught:
            load_run_config(path)
        assert str(caught.value).startswith(f"{path}: {message}")
        # the command refuses before the run folder: one line, exit status 2
        run = tmp_path / "run"
        assert main(["train", "--config", str(path), f"train.output_dir={run}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"groupwise train: {path}: {message}")
        assert not run.exists()


def test_data_dir_documents_how_it_is_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --print-config says what resolve_data_dir does when data.data_dir is not set
    from groupwise.config import field_docs
    from groupwise.data import resolve_data_dir
    from groupwise.train.config import DataConfig

    doc = " ".join(field_docs(DataConfig)["data_dir"].split())
    assert doc == (
        "Benchmark folder laid out like ../shared/data. Default: env GROUPWISE_DATA, else a "
        "shared/data folder beside the working folder (../shared/data) or beside groupwise's "
        "checkout, else the public hub copies (GROUPWISE_DATA=hub: always them)."
    )
    work, shared = tmp_path / "work", tmp_path / "shared" / "data"
    work.mkdir()
    shared.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("GROUPWISE_DATA", str(tmp_path / "elsewhere"))
    assert resolve_data_dir(None) == tmp_path / "elsewhere"
    monkeypatch.setenv("GROUPWISE_DATA", "hub")
    assert resolve_data_dir(None) is None
    monkeypatch.delenv("GROUPWISE_DATA")
    assert resolve_data_dir(None) == work.parent / "shared" / "data"
    assert resolve_data_dir("mine") == Path("mine")
