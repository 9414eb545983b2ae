"""The checks of a training config, as functions of the config (train.config) and nothing else.

`check_config`: every value in its declared range (`groupwise.options.option`) and the rules
between options that one option alone cannot state; loading a file runs it
(train.config_file), and it gives the same answer on every machine. `check_names`: the names the
config gives that registries resolve (reward components, the advantage estimator and every check
of the algorithm's build, benchmarks with their splits and options); reward.plugins extend
those registries, so train.preflight runs it once the plugins are imported. Errors are one-line
ConfigErrors naming the key and what is valid.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from groupwise.config import ConfigError
from groupwise.data import TEMPLATES, MixPart, benchmark_options, benchmark_splits
from groupwise.options import check_options
from groupwise.rewards import checking_mode, component_names, correct_value
from groupwise.train.algorithm import build_algorithm
from groupwise.train.config import DEFAULT_BENCHMARK, AlgorithmConfig, Config, RolloutConfig

# (benchmark, split, options, the key prefix of its messages) of one source of problems
Part = tuple[str, str | None, Any, str]


def check_config(c: Config) -> None:
    """Every option in its range, and the rules between options; ConfigError naming the first
    key that breaks one."""
    _check_numbers(c)
    # one process here; train.preflight checks again with the processes of the launch
    check_question_split(c.rollout.questions_per_step, 1, c.algorithm.minibatches)
    check_engine_options(c.rollout)
    if not c.train.output_dir.strip():
        raise ConfigError("train.output_dir is empty: name the run folder")
    _check_dapo(c)
    if c.train.precision == "bfloat16" and c.model.dtype != "float32":
        raise ConfigError(
            f"train.precision=bfloat16 runs float32 weights' passes in bfloat16; with "
            f"model.dtype={c.model.dtype} the weights themselves are {c.model.dtype}: set "
            "model.dtype=float32 (or train.precision=float32)"
        )
    _check_device_name(c.model.device)
    if c.model.lora:
        _check_target_modules(c.model.lora_target_modules)
    if c.data.prompt not in TEMPLATES:
        raise ConfigError(
            f"data.prompt: invalid value {c.data.prompt!r}; valid choices: " + ", ".join(TEMPLATES)
        )
    try:
        checking_mode(c.reward.checking)
    except ValueError as error:
        raise ConfigError(f"reward.checking: {error}") from None
    if not c.reward.weights:
        raise ConfigError("reward.weights is empty: name at least one reward component")
    _training_parts(c)
    _heldout_part(c)


def check_names(c: Config) -> None:
    """The reward components, the algorithm (its estimator and every check of its build:
    build_algorithm) and the benchmarks the config names, in their registries; ConfigError
    naming the first key whose name is unknown or does not fit."""
    _check_rewards(c)
    build_algorithm(c)
    for benchmark, split, options, prefix in _training_parts(c):
        _check_benchmark(benchmark, split, options, prefix)
    heldout = _heldout_part(c)
    if heldout is not None:
        _check_benchmark(heldout.benchmark, heldout.split, heldout.options, "data.heldout.")


def check_question_split(questions: int, processes: int, minibatches: int) -> None:
    """Each process takes whole questions of each mini-batch: questions_per_step must be a
    multiple of processes x algorithm.minibatches."""
    if questions % (processes * minibatches):
        raise ConfigError(
            f"rollout.questions_per_step={questions} must be a multiple of the number of "
            f"processes ({processes}) x algorithm.minibatches ({minibatches}): each process "
            "takes whole questions of each mini-batch"
        )


def check_staleness(rollout: RolloutConfig) -> None:
    """rollout.staleness=1 samples in a background thread on the vllm engine: what it cannot
    do with is refused (docs/guides/train.md, "Sampling ahead of learning")."""
    if not rollout.staleness:
        return
    why = []
    if rollout.engine == "transformers":
        why.append("rollout.engine=vllm (the transformers engine samples from the policy itself)")
    if rollout.dynamic_sampling:
        why.append("rollout.dynamic_sampling=false (its draws depend on the step's own)")
    if rollout.logp_old == "sampler":
        why.append(
            "rollout.logp_old=recompute (the sampler's log-probs are one update old: "
            "the trainer's own pass gives logp_old)"
        )
    if why:
        raise ConfigError(f"rollout.staleness={rollout.staleness} needs {' and '.join(why)}")


def check_engine_options(rollout: RolloutConfig) -> None:
    """The options that belong to one engine; rollout.engine=auto is checked once preflight has
    resolved it."""
    if rollout.engine == "transformers" and rollout.importance_correction:
        raise ConfigError(
            "rollout.importance_correction corrects for the vllm engine's sampler; it needs "
            "rollout.engine=vllm"
        )
    check_staleness(rollout)
    if rollout.logp_old == "sampler":
        why = []
        if rollout.engine == "transformers":
            why.append("rollout.engine=vllm (the transformers engine returns none)")
        if rollout.top_p < 1:
            why.append(
                f"rollout.top_p=1 (at {rollout.top_p} the sampler's are of the nucleus it drew "
                "from, not the policy's)"
            )
        if rollout.importance_correction:
            why.append("rollout.importance_correction=false (it compares the two)")
        if why:
            raise ConfigError(f"rollout.logp_old=sampler needs {' and '.join(why)}")
    copy_dtype = rollout.engine == "transformers" and rollout.dtype != "auto"
    if copy_dtype and not rollout.inference_copy:
        raise ConfigError(
            f"rollout.dtype={rollout.dtype} sets the dtype of the inference copy; "
            "it needs rollout.inference_copy=true (or rollout.dtype=auto)"
        )


def _check_numbers(c: Config) -> None:
    """Finite numbers, and every option in its declared range."""
    for key, value in _numbers(c):
        if not math.isfinite(value):
            raise ConfigError(f"{key} must be a finite number, got {value}")
    for section in dataclasses.fields(c):
        values = getattr(c, section.name)
        try:
            check_options(values, lambda option, s=section.name: f"{s}.{option}")
            if isinstance(values, AlgorithmConfig):
                values.check_values(lambda option: f"algorithm.{option}")
        except ValueError as error:
            raise ConfigError(str(error)) from None


def _numbers(config: Config) -> list[tuple[str, float]]:
    """(key, value) of every float option, and of the numbers inside mapping options
    (reward.weights), for the finiteness check."""
    found = []
    for section in dataclasses.fields(config):
        values = getattr(config, section.name)
        for spec in dataclasses.fields(values):
            key, value = f"{section.name}.{spec.name}", getattr(values, spec.name)
            if isinstance(value, float):
                found.append((key, value))
            elif isinstance(value, dict):
                found += [(f"{key}.{k}", v) for k, v in value.items() if isinstance(v, float)]
    return found


def _check_dapo(c: Config) -> None:
    """Dynamic sampling's LENS-shaped metric needs LENS; the overlong buffer lies inside the
    length limit."""
    if c.rollout.filter_metric == "shaped" and c.algorithm.advantage != "lens":
        raise ConfigError(
            "rollout.filter_metric=shaped filters on the LENS-shaped rewards; it needs "
            f"algorithm.advantage=lens (got {c.algorithm.advantage!r})"
        )
    if c.reward.overlong_buffer > c.rollout.max_new_tokens:
        raise ConfigError(
            f"reward.overlong_buffer={c.reward.overlong_buffer} must not exceed "
            f"rollout.max_new_tokens={c.rollout.max_new_tokens}: the buffer lies before the limit"
        )


def _check_device_name(device: str) -> None:
    """model.device: "auto", or the name of a torch device (whether this machine has it is
    train.preflight's question)."""
    if device == "auto":
        return
    import torch  # only here: reading a config does not need torch otherwise

    try:
        torch.device(device)
    except RuntimeError:
        raise ConfigError(
            f"model.device: invalid value {device!r}; valid: auto, cpu, cuda, cuda:N, mps"
        ) from None


def _check_target_modules(target: str | list[str]) -> None:
    """model.lora_target_modules: "all-linear", a non-empty list of module names, or the
    regular expression peft matches against each module's full name (e.g. ".*(q_proj|v_proj)")."""
    if isinstance(target, list):
        if not target or not all(name.strip() for name in target):
            raise ConfigError(
                f"model.lora_target_modules: {target!r} must name at least one module, with "
                "no empty name"
            )
        return
    try:
        re.compile(target)
    except re.error as error:
        raise ConfigError(
            f"model.lora_target_modules: {target!r} is not a regular expression ({error})"
        ) from None
    if not target.strip():
        raise ConfigError(
            "model.lora_target_modules is empty: give all-linear, a list of module names, or a "
            "regular expression matching the full names of the modules to adapt "
            "(e.g. '.*(q_proj|v_proj)')"
        )


def _check_rewards(c: Config) -> None:
    """reward.weights naming known components; a correctness component that is not a
    correctness reward (build_algorithm checks the rest)."""
    known = component_names()
    for name in c.reward.weights:
        if name not in known:
            raise ConfigError(
                f"reward.weights: unknown component {name!r}; valid components: "
                f"{', '.join(known)} (more come from reward.plugins)"
            )
    component = c.reward.correctness_component
    if component in c.reward.weights:
        try:
            correct_value(component)
        except ValueError as error:
            raise ConfigError(f"reward.correctness_component: {error}") from None


def _training_parts(c: Config) -> list[Part]:
    """Where the training problems come from: each part of data.mix (which then replaces
    data.benchmark, data.split and data.options), else those three; ConfigError for a
    malformed part."""
    d = c.data
    if not d.mix:
        return [(d.benchmark, d.split, d.options, "data.")]
    if (d.benchmark, d.split, d.options) != (DEFAULT_BENCHMARK, "train", {}):
        raise ConfigError(
            "data.mix replaces data.benchmark, data.split and data.options: give the "
            "benchmark, split and options in each part of data.mix"
        )
    parts: list[Part] = []
    for number, given in enumerate(d.mix):
        where = f"data.mix[{number}]"
        try:
            part = MixPart.from_dict(given, where)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        parts.append((part.benchmark, part.split, part.options, f"{where}."))
    return parts


def _heldout_part(c: Config) -> MixPart | None:
    """data.heldout (groupwise.train.heldout), None when absent; ConfigError for a malformed
    one, a split the run trains on, or train.eval_every without it."""
    t = c.train  # the ranges of eval_every and eval_samples are checked with every option's
    if not c.data.heldout:
        if t.eval_every:
            raise ConfigError(
                f"train.eval_every={t.eval_every} needs data.heldout: the held-out problems, "
                "e.g. {benchmark: arith, split: test, options: {level: mid, size: 200}}"
            )
        return None
    try:
        part = MixPart.from_dict(c.data.heldout, "data.heldout")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    trained = [(m.get("benchmark"), m.get("split")) for m in c.data.mix] or [
        (c.data.benchmark, c.data.split)
    ]
    if (part.benchmark, part.split) in trained:
        raise ConfigError(
            f"data.heldout: {part.label} is a split the run trains on; held-out problems come "
            "from another split (e.g. split: test)"
        )
    return part


def _check_benchmark(name: str, split: str | None, options: Any, prefix: str) -> None:
    try:
        splits = benchmark_splits(name)
    except ValueError as error:
        raise ConfigError(f"{prefix}benchmark: {error}") from None
    if split is not None and split not in splits:
        raise ConfigError(
            f"{prefix}split: benchmark {name!r} has no split {split!r}; valid splits: "
            + ", ".join(splits)
        )
    valid = benchmark_options(name)
    for key in options if valid is not None else ():
        if key not in valid:
            listed = ", ".join(valid) if valid else "none (this benchmark takes no options)"
            raise ConfigError(
                f"{prefix}options: unknown option {key!r} for benchmark {name!r}; "
                f"valid options: {listed}"
            )
