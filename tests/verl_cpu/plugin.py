"""The module verl loads: `VERL_USE_EXTERNAL_MODULES=verl_cpu.plugin` (package docstring).

The platform must be registered before verl's modules that ask for it at import, so `host`
first; then the rollout `hf_cpu` and the batch record.
"""

from verl_cpu import host, record, rollout

__all__ = ["host", "record", "rollout"]
