"""Preflight: what a run needs of this machine and this process, checked when a command starts
a run (`groupwise train`, the testbed, the benches), before any model or data loads; never when
a config file is read, so a run's config.yaml loads anywhere.

`preflight` imports reward.plugins, checks the names the config gives in the registries they
extend (train.config_checks.check_names), resolves rollout.engine=auto, train.precision=auto and
rollout.dtype=precision (train.precision), and checks the device, the installed engine and
logger packages, and the processes of the launch (WORLD_SIZE). A refusal is one line naming the
key; `load_run_config` blames it on the file or the override, as loading does
(train.config_file).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import torch

from groupwise.config import ConfigError
from groupwise.train.config import Config, RolloutConfig
from groupwise.train.config_checks import (
    check_engine_options,
    check_names,
    check_question_split,
)
from groupwise.train.config_file import load_config
from groupwise.train.distributed import processes_from_environment
from groupwise.train.precision import resolved_precision
from groupwise.train.report_to import check_report_to


def load_run_config(path: str | Path | None, overrides: Sequence[str] = ()) -> Config:
    """The config a run starts with: the file and overrides loaded and checked (load_config),
    then `preflight`; errors name the key and where it came from."""
    return load_config(path, overrides, then=preflight)


def preflight(config: Config) -> Config:
    """`config` ready to run here, with rollout.engine=auto resolved (`installed_engine`) and
    train.precision=auto and rollout.dtype=precision (train.precision); ConfigError naming the
    key of the first thing this machine or process cannot give."""
    for module in config.reward.plugins:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigError(f"reward.plugins: cannot import {module!r} ({error})") from None
    check_names(config)
    rollout = config.rollout
    if rollout.engine == "auto":
        rollout = _resolved_auto_engine(rollout)
        check_engine_options(rollout)
    processes = processes_from_environment()
    check_question_split(rollout.questions_per_step, processes, config.algorithm.minibatches)
    _check_engine(rollout.engine, processes)
    check_report_to(config.train.report_to)
    _check_device(config.model.device)
    return resolved_precision(dataclasses.replace(config, rollout=rollout))


def _resolved_auto_engine(rollout: RolloutConfig) -> RolloutConfig:
    """rollout.engine=auto made the engine installed here. Where that is transformers, sampling
    ahead (vllm only) becomes sampling then learning, said in one line, so that a preset written
    for vLLM (configs/smollm2_arith.yaml) still runs without it; config.yaml records what ran."""
    rollout = dataclasses.replace(rollout, engine=installed_engine())
    if rollout.engine == "transformers" and rollout.staleness:
        print(
            "groupwise train: rollout.engine=auto is transformers here, which samples from the "
            "policy itself: rollout.staleness=0, rollout.importance_correction=false",
            flush=True,
        )
        rollout = dataclasses.replace(rollout, staleness=0, importance_correction=False)
    return rollout


def installed_engine() -> str:
    """What rollout.engine=auto means here: vllm where vLLM is importable and the run is one
    process (one engine per training process is what the vllm engine runs), else transformers."""
    has_vllm = importlib.util.find_spec("vllm") is not None
    return "vllm" if has_vllm and processes_from_environment() == 1 else "transformers"


def _check_engine(engine: str, processes: int) -> None:
    """rollout.engine=vllm: one training process, vLLM installed."""
    if engine != "vllm":
        return
    if processes > 1:
        raise ConfigError(
            "rollout.engine=vllm runs one engine in a single training process; with several "
            "processes use rollout.engine=transformers"
        )
    if importlib.util.find_spec("vllm") is None:
        # only here: groupwise.rollout loads transformers, which a refusal does not need
        from groupwise.rollout.vllm_engine import VLLM_INSTALL_HINT

        raise ConfigError(f"rollout.engine=vllm: {VLLM_INSTALL_HINT}")


def _check_device(device: str) -> None:
    """model.device: "auto", or a torch device this machine has (its name was checked when the
    config loaded)."""
    if device == "auto":
        return
    parsed = torch.device(device)
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (parsed.index is not None and parsed.index >= count):
            raise ConfigError(
                f"model.device={device}, but this machine has {count} CUDA device(s); "
                "use model.device=auto or cpu"
            )
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("model.device=mps, but MPS is not available here; use auto or cpu")
