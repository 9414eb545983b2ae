"""A CPU as verl's device: platform `cpu`, FSDP engines for it, a gloo process group.

What verl 0.9.1 lacks for a CPU, each filled through the extension point verl offers for it:

- `PlatformRegistry` has no CPU platform (it falls back to "nvidia"): `CpuPlatform`, chosen by
  `VERL_PLATFORM=cpu`. Its current device is `torch.device("cpu")`, not an index, because verl
  passes `get_device_id()` to `.to()` and `device=`, where an integer means a CUDA device; its
  Ray resource stays "GPU" because verl's ResourcePoolManager counts GPUs only (the run declares
  logical ones: `+ray_kwargs.ray_init.num_gpus`).
- `EngineRegistry` has the FSDP engines for cuda and npu only: registered for cpu too.
- `verl.utils.distributed.initialize_global_process_group_ray` builds the backend
  `cpu:gloo,{device}:{backend}` with no switch, which on a CPU is `cpu:gloo,cpu:gloo`, a
  duplicate device torch refuses: replaced (before `verl.workers.engine_workers` imports it by
  name) by one that asks verl's own for plain `gloo`. The one replaced verl function.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM = "cpu"
"""VERL_PLATFORM's value for this platform."""


class HostMemory(ModuleType):
    """What verl asks of `torch.cuda` (its platform's device module), for the host: torch.cpu's
    own functions (synchronize, streams, device count), the host's memory for the memory queries,
    the CPU generator for the RNG state, and nothing to free for the cache calls."""

    def __init__(self) -> None:
        super().__init__("verl_cpu_device")

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def empty_cache() -> None:
        """Nothing to free: the host allocator keeps no device cache."""

    ipc_collect = reset_peak_memory_stats = empty_cache

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        """No device memory to cap."""

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "CPU"

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)


@PlatformRegistry.register(platform=PLATFORM)
class CpuPlatform(PlatformBase):
    """verl's platform interface for the host CPU (module docstring)."""

    device_memory = HostMemory()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return self.device_memory

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # chosen by VERL_PLATFORM only, never detected

    def current_device(self) -> torch.device:  # verl's type says int: see the module docstring
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        """One device: nothing to select."""

    def synchronize(self, device_index: int | None = None) -> None:
        """Host work is synchronous."""

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """The host allocator has no settings verl sets."""

    def empty_cache(self) -> None:
        """Nothing to free."""

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "VERL_CPU_VISIBLE_DEVICES"  # nothing reads it: Ray sets it per worker, harmlessly

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        """No device profiler."""

    def profiler_stop(self) -> None:
        """No device profiler."""

    def ray_resource_name(self) -> str:
        return "GPU"  # verl's resource pools count GPUs: the run declares logical ones

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


# imported after the platform is registered: these ask for it at import
from verl.utils import distributed  # noqa: E402
from verl.workers.engine.base import EngineRegistry  # noqa: E402
from verl.workers.engine.fsdp.transformer_impl import (  # noqa: E402
    FSDPEngineWithLMHead,
    FSDPEngineWithValueHead,
)

verl_process_group = distributed.initialize_global_process_group_ray


def gloo_process_group(timeout_second: int | None = None, backend: str | None = None) -> None:
    """verl's initialize_global_process_group_ray with plain gloo where it would build
    "cpu:gloo,cpu:gloo" (module docstring); a backend verl names itself is kept."""
    verl_process_group(timeout_second=timeout_second, backend=backend or "gloo")


distributed.initialize_global_process_group_ray = gloo_process_group
EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=PLATFORM)(
    FSDPEngineWithLMHead
)
EngineRegistry.register(model_type="value_model", backend=["fsdp", "fsdp2"], device=PLATFORM)(
    FSDPEngineWithValueHead
)
