"""The rollout engine of a run (`rollout.engine`): groupwise's transformers loop, or vLLM in the
training process (groupwise.rollout.vllm_generator); both behind the Generator protocol, so the
step does not know which samples (docs/guides/train.md, "Rollout engine")."""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from groupwise.models import DTYPES
from groupwise.rollout import Generator, TransformersGenerator
from groupwise.train.config import Config


def build_generator(
    config: Config, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> Generator:
    """The generator `config.rollout` asks for, sampling from `model` (the policy); the config
    is one train.preflight returned (rollout.engine=auto and rollout.dtype=precision
    resolved)."""
    rollout = config.rollout
    if rollout.engine == "auto" or rollout.dtype == "precision":
        raise ValueError(
            f"rollout.engine={rollout.engine}, rollout.dtype={rollout.dtype}: engine auto and "
            "dtype precision are resolved when a run starts: build from the config that "
            "groupwise.train.preflight.preflight returns"
        )
    if rollout.engine == "vllm":
        from groupwise.rollout.vllm_generator import VLLMGenerator

        return VLLMGenerator(
            model,
            tokenizer,
            config.model.name,
            dtype=config.model.dtype if rollout.dtype == "auto" else rollout.dtype,
            seed=config.model.seed,
            memory=rollout.vllm_memory,
            engine_args=(
                None
                if rollout.vllm_enforce_eager is None
                else {"enforce_eager": rollout.vllm_enforce_eager}
            ),
        )
    return TransformersGenerator(
        model,
        tokenizer,
        batch_size=rollout.batch_size,
        inference_copy=rollout.inference_copy,
        dtype=None if rollout.dtype == "auto" else DTYPES[rollout.dtype],
    )


def engine_record(generator: Generator) -> dict[str, Any]:
    """What a step logs of the engine beyond the step's own numbers (vLLM: its cores and weight
    syncs); nothing for the transformers engine."""
    record = getattr(generator, "record", None)
    return record() if callable(record) else {}
