"""What `train.precision=auto` and `rollout.dtype=precision` mean on this machine: bfloat16
where the device multiplies bfloat16 in hardware, float32 elsewhere (docs/guides/train.md,
"Mixed precision").

A CPU without AMX or avx512_bf16 runs a bfloat16 matmul through a slow generic kernel: on 2
AVX2 cores with torch 2.13, a 512 x 576 by 576 x 1536 product took 753 ms in bfloat16 against
7.5 ms in float32 (bench/matmul_dtype.py), so there bfloat16 costs speed where it was meant to
give it. Preflight resolves both options once, and the run's config.yaml records what ran.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from groupwise.train.config import Config
from groupwise.train.distributed import requested_device

BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""The /proc/cpuinfo flags of x86 units that multiply bfloat16 (AVX512-BF16, AMX)."""


def cpu_flags(path: str | Path = "/proc/cpuinfo") -> set[str]:
    """The feature flags of this machine's first CPU; empty where the file is absent (not
    Linux) or has no flags line."""
    try:
        lines = Path(path).read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return set()
    for line in lines:
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def native_bfloat16(device: str, flags: set[str] | None = None) -> bool:
    """Whether `device` ("cpu", "cuda", "cuda:1", "mps", ...) multiplies bfloat16 in hardware:
    a CUDA device that supports it, a CPU with one of BFLOAT16_CPU_FLAGS (`flags`: this CPU's
    by default). Anything else (MPS, a CPU that is not x86) counts as not: float32 is the safe
    choice there."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if kind == "cpu":
        return any(flag in (cpu_flags() if flags is None else flags) for flag in BFLOAT16_CPU_FLAGS)
    return False


def resolved_precision(config: Config, native: bool | None = None) -> Config:
    """`config` with train.precision=auto and rollout.dtype=precision made explicit: bfloat16
    where the run's device multiplies it natively (`native`: `native_bfloat16` of
    model.device by default), else float32; the sampler's weights in bfloat16 where the passes
    run in it, else in model.dtype (rollout.dtype=auto)."""
    train, rollout = config.train, config.rollout
    if train.precision != "auto" and rollout.dtype != "precision":
        return config
    if native is None:
        native = native_bfloat16(requested_device(config.model.device))
    fast = "bfloat16" if native and config.model.dtype == "float32" else "float32"
    if train.precision == "auto":
        train = dataclasses.replace(train, precision=fast)
    if rollout.dtype == "precision":
        dtype = "bfloat16" if train.precision == "bfloat16" else "auto"
        rollout = dataclasses.replace(rollout, dtype=dtype)
    return dataclasses.replace(config, train=train, rollout=rollout)


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype the training passes autocast to for a resolved train.precision (None: the
    weights' own)."""
    if precision == "auto":
        raise ValueError(
            "train.precision=auto is resolved when a run starts: build from the config that "
            "groupwise.train.preflight.preflight returns"
        )
    return torch.bfloat16 if precision == "bfloat16" else None
