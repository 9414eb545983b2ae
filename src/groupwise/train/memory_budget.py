"""A run's host memory: what its settings need, checked against the machine before the sampler
starts and the first update runs, and what it held, kept in the run folder as it goes
(docs/guides/train.md, "Memory").

`estimate_memory` adds up, in GiB, what a training process on a CPU holds at its peak:

- held before sampling: the policy's weights (model.dtype), three float32 copies of the
  trainable parameters (gradient, Adam's two moments), the sampler's copy of the weights (vLLM's,
  or the transformers engine's inference_copy) and the libraries (RUNTIME_GIB);
- vLLM's share: its CPU worker (0.32) reserves rollout.vllm_memory x the host's total memory
  for the whole process, the above included, and fills what the process does not hold yet
  with KV cache (VLLM_CPU_KVCACHE_SPACE GiB of cache on top where the environment sets it);
  then its working buffers, VLLM_BUFFERS x the logits of one engine step
  (max_num_batched_tokens x vocab floats); the transformers engine's buffers instead: the
  prefill's logits over every prompt token of the completions decoded together
  (TRANSFORMERS_PREFILL copies) and their key-value cache (2 x hidden floats a token a layer);
- update: the saved activations of one micro-batch's forward pass, per token
  4 bytes x (layers x (10 hidden + 4 intermediate + heads x tokens per row) + 4 vocab): each
  layer's saved inputs and attention scores, and the full-vocabulary logits, their log-softmax
  and both gradients (with gradient checkpointing, one layer's worth plus each layer's input).

The constants were measured against peak resident memory on the presets
(bench/memory_estimate.py). `check_memory` refuses, in one line naming the setting to lower,
a run whose estimate exceeds the memory available now, and warns within WARN_SHARE of it.
`MemoryNote` is RUN/memory.json: the estimate and, after each step, the peak so far; a session
the kernel killed leaves it marked unfinished, which the next --resume reports.
"""

from __future__ import annotations

import json
import math
import os
import resource
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from groupwise.config import ConfigError
from groupwise.train.config import Config

__all__ = [
    "HostMemory",
    "MemoryEstimate",
    "MemoryNote",
    "ModelShape",
    "check_memory",
    "estimate_memory",
    "peak_memory_gib",
]

GIB = 2**30
RUNTIME_GIB = {"transformers": 0.8, "vllm": 1.6}
"""Resident memory of the libraries a run loads, by rollout engine (GiB)."""
VLLM_BUFFERS = 3.5
"""vLLM's working memory beyond its share, in logits of one engine step (measured: 2.6 GiB on
SmolLM2-135M, 4096 tokens a step)."""
TRANSFORMERS_PREFILL = 4
"""Copies of the prefill's logits the transformers engine holds at once (measured: SmolLM2's
peak with 32 completions of a 70-token prompt decoded together)."""
VLLM_STEP_TOKENS = 4096
"""max_num_batched_tokens of a groupwise vLLM engine on a CPU (groupwise.rollout.vllm_engine)."""
WARN_SHARE = 0.85
"""An estimate above this share of the available memory warns: it is an estimate."""
NOTE = "memory.json"
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class HostMemory:
    """The machine's memory (GiB): total, and available now (/proc/meminfo MemAvailable)."""

    total: float
    available: float

    @classmethod
    def read(cls, path: str = "/proc/meminfo") -> HostMemory:
        """This machine's, from /proc/meminfo (kB values)."""
        fields = {}
        with open(path, encoding="ascii") as meminfo:
            for line in meminfo:
                name, _, value = line.partition(":")
                fields[name] = int(value.split()[0]) * 1024 / GIB
        return cls(fields["MemTotal"], fields["MemAvailable"])


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of the policy: parameter counts and the transformer's sizes."""

    parameters: int
    trainable: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    vocab: int

    @classmethod
    def of(cls, model: torch.nn.Module) -> ModelShape:
        """The shape of a transformers causal LM (peft-wrapped or not)."""
        config = model.config
        hidden = int(config.hidden_size)
        return cls(
            parameters=sum(p.numel() for p in model.parameters()),
            trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
            layers=int(config.num_hidden_layers),
            hidden=hidden,
            intermediate=int(getattr(config, "intermediate_size", None) or 4 * hidden),
            heads=int(config.num_attention_heads),
            vocab=int(config.vocab_size),
        )


@dataclass(frozen=True)
class MemoryEstimate:
    """GiB by part (module docstring); rows: of one micro-batch (whole groups)."""

    parts: dict[str, float]
    rows: int

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    def describe(self) -> str:
        """ "model 0.5, update 4.9, ... GiB" in descending order."""
        ordered = sorted(self.parts.items(), key=lambda item: -item[1])
        return ", ".join(f"{name} {gib:.1f}" for name, gib in ordered) + " GiB"


def estimate_memory(config: Config, shape: ModelShape, prompt_tokens: int) -> MemoryEstimate:
    """What one training process of `config` holds at its peak (module docstring), for a policy
    of `shape` whose longest prompt is `prompt_tokens` tokens."""
    rollout, train = config.rollout, config.train
    weight_bytes = _DTYPE_BYTES.get(config.model.dtype, 4)
    rows = _micro_batch_rows(train.micro_batch_size, rollout.group_size)
    tokens = rows * rollout.max_new_tokens + math.ceil(rows / rollout.group_size) * prompt_tokens
    gib_per_token = _activation_bytes(shape, prompt_tokens + rollout.max_new_tokens, config) / GIB
    parts = {
        "model": shape.parameters * weight_bytes / GIB,
        "gradients and optimizer": 3 * 4 * shape.trainable / GIB,
        "runtime": RUNTIME_GIB["vllm" if rollout.engine == "vllm" else "transformers"],
        **_sampler_copy(config, shape),
    }
    if rollout.engine == "vllm":
        parts["vLLM's KV cache"] = _vllm_cache(rollout.vllm_memory, sum(parts.values()))
        parts["vLLM's buffers"] = VLLM_BUFFERS * VLLM_STEP_TOKENS * shape.vocab * 4 / GIB
    else:
        parts["sampler's buffers"] = _transformers_buffers(config, shape, prompt_tokens)
    parts["update"] = tokens * gib_per_token
    return MemoryEstimate(parts, rows)


def _micro_batch_rows(micro_batch_size: int, group_size: int) -> int:
    """Rows of one micro-batch: train.micro_batch_size rounded to whole groups, at least one."""
    return max(1, round(micro_batch_size / group_size)) * group_size


def _activation_bytes(shape: ModelShape, row_tokens: int, config: Config) -> float:
    """Bytes of saved activations per token of a training forward pass (module docstring)."""
    per_layer = 10 * shape.hidden + 4 * shape.intermediate + shape.heads * row_tokens
    layers = shape.layers * per_layer
    if config.model.gradient_checkpointing:
        layers = shape.layers * shape.hidden + per_layer
    return 4.0 * (layers + 4 * shape.vocab)


def _transformers_buffers(config: Config, shape: ModelShape, prompt_tokens: int) -> float:
    """The transformers engine's prefill logits and key-value cache (GiB; module docstring)."""
    rollout = config.rollout
    rows = min(rollout.batch_size, rollout.group_size * rollout.questions_per_step)
    logits = TRANSFORMERS_PREFILL * rows * prompt_tokens * shape.vocab
    cache = rows * (prompt_tokens + rollout.max_new_tokens) * shape.layers * 2 * shape.hidden
    return 4.0 * (logits + cache) / GIB


def _sampler_copy(config: Config, shape: ModelShape) -> dict[str, float]:
    """The sampler's copy of the weights (GiB), where it keeps one."""
    rollout = config.rollout
    dtype = config.model.dtype if rollout.dtype == "auto" else rollout.dtype
    copy = shape.parameters * _DTYPE_BYTES.get(dtype, 4) / GIB
    keeps_copy = rollout.engine == "vllm" or (rollout.inference_copy and config.model.lora)
    return {"sampler's copy": copy} if keeps_copy else {}


def _vllm_cache(vllm_memory: float, held: float) -> float:
    """vLLM's KV cache on a CPU (GiB): VLLM_CPU_KVCACHE_SPACE, else vllm_memory x total less
    what the process `held` when the engine started (module docstring)."""
    cache = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    if cache:
        return float(cache)
    return max(0.0, vllm_memory * HostMemory.read().total - held)


def check_memory(estimate: MemoryEstimate, config: Config, host: HostMemory) -> None:
    """ConfigError in one line, naming the setting to lower and the value that would fit, when
    `estimate` (per process; LOCAL_WORLD_SIZE processes on this machine) exceeds the memory
    available; a warning within WARN_SHARE of it."""
    need, have = estimate.total * int(os.environ.get("LOCAL_WORLD_SIZE", "1")), host.available
    if need <= WARN_SHARE * have:
        return
    what = (
        f"this run needs about {need:.1f} GiB ({estimate.describe()}) and this machine has "
        f"{have:.1f} GiB available of {host.total:.1f}"
    )
    if need <= have:
        warnings.warn(f"{what}: close to the limit (the estimate is within 15 %)", stacklevel=2)
        return
    raise ConfigError(f"{_setting_to_lower(estimate, config, host)}: {what}")


def _setting_to_lower(estimate: MemoryEstimate, config: Config, host: HostMemory) -> str:
    """The larger of vLLM's cache and the update, as "key=value: lower it to at most X"."""
    cache, update = estimate.parts.get("vLLM's KV cache", 0.0), estimate.parts["update"]
    if cache >= update and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        # vLLM's share holds the process up to its start; its buffers and the update come on top
        after = update + estimate.parts["vLLM's buffers"]
        fits = math.floor((host.available - after) / host.total * 100) / 100
        advice = f"at most {fits:.2f}" if fits >= 0.01 else "0.01, and lower the update's memory"
        return f"rollout.vllm_memory={config.rollout.vllm_memory:g}: lower it to {advice}"
    share = max(0.0, (host.available - estimate.total + update) / update)
    group = config.rollout.group_size
    rows = math.floor(share * estimate.rows / group) * group
    advice = f"at most {rows}" if rows >= 1 else f"{group}, and lower rollout.max_new_tokens"
    return f"train.micro_batch_size={config.train.micro_batch_size}: lower it to {advice}"


def peak_memory_gib() -> float:
    """The largest resident memory this process has held so far (GiB; ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


class MemoryNote:
    """RUN/memory.json: what the session reserved (the estimate), the peak and step so far, and
    whether it finished; written at start, after every step and at the end."""

    def __init__(self, run_dir: Path, estimate: MemoryEstimate, host: HostMemory) -> None:
        self.path = Path(run_dir) / NOTE
        self.record: dict[str, Any] = {
            "finished": False,
            "step": None,
            "peak_gib": round(peak_memory_gib(), 2),
            "estimate_gib": {k: round(v, 2) for k, v in estimate.parts.items()},
            "available_gib_at_start": round(host.available, 2),
            "total_gib": round(host.total, 2),
        }
        self._write()

    def after_step(self, step: int) -> None:
        """The peak and the step, after each step."""
        self.record.update(step=step, peak_gib=round(peak_memory_gib(), 2))
        self._write()

    def finished(self) -> None:
        """The session ended under its own control (done, stopped, or an error it reported)."""
        self.record["finished"] = True
        self._write()

    def _write(self) -> None:
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self.record), encoding="utf-8")
        partial.replace(self.path)


def unfinished_session(run_dir: Path) -> str | None:
    """One line about the run's previous session when it ended without finishing (a kill: the
    kernel's out-of-memory killer, or kill -9), from its memory.json; None otherwise."""
    path = Path(run_dir) / NOTE
    try:
        note = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if note.get("finished", True):
        return None
    after = f"after step {note['step']}" if note.get("step") else "before its first step"
    reserved = ", ".join(f"{k} {v:.1f}" for k, v in note.get("estimate_gib", {}).items())
    return (
        f"the previous session of this run ended without finishing {after} (killed: by the "
        f"kernel when memory ran out, or by a signal that cannot be caught); it held "
        f"{note.get('peak_gib', 0):.1f} GiB at its peak of {note.get('total_gib', 0):.1f}, "
        f"reserved by estimate: {reserved} GiB ({path})"
    )
