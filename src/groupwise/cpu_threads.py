"""The CPU threads of a groupwise command, set before torch loads (docs/guides/train.md, "A busy
machine").

OpenMP reads its settings once, when torch's library loads, so the `groupwise` command sets them
first thing (`settle_threads`), each only where the environment does not already say:

- OMP_WAIT_POLICY=PASSIVE: an OpenMP thread waiting for work sleeps instead of spinning. With
  spinning threads, every other process on the machine loses the cores they spin on, and a
  command beside another loses its own: measured on 2 cores (bench/busy_machine.py), one
  2-thread training process beside another 2-thread one took 3.8x its time alone with the
  default policy and 2.5x with PASSIVE.
- OMP_NUM_THREADS: the cores this process may run on (its scheduling affinity: `taskset` and
  cgroup cpusets shrink it), not the machine's. Fewer threads than cores (one) measured slower
  beside other work (3.0x) as well as alone (2.3x slower).

vLLM's CPU engine takes the same cores (groupwise.rollout.vllm_cpu). The command says what it
took (`announce`) once its arguments are checked, so that a refused command stays one line.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping, Sequence

__all__ = ["announce", "core_list", "settle_threads"]

_settled: list[str] = []  # what settle_threads set in this process, for announce


def settle_threads(environ: MutableMapping[str, str] | None = None) -> str:
    """Set OMP_WAIT_POLICY and OMP_NUM_THREADS in `environ` (default os.environ) where unset
    (module docstring); returns one line saying what the command took."""
    env = os.environ if environ is None else environ
    cores = sorted(os.sched_getaffinity(0))
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("OMP_NUM_THREADS", str(len(cores)))
    line = (
        f"{env['OMP_NUM_THREADS']} threads on cores {core_list(cores)} of "
        f"{os.cpu_count()} (OMP_WAIT_POLICY={env['OMP_WAIT_POLICY']})"
    )
    if environ is None:
        _settled[:] = [line]
    return line


def announce(prog: str) -> None:
    """Print `PROG: <what settle_threads set>` on standard output (standard error is for what
    went wrong), once, when this process settled its threads (the `groupwise` command did);
    nothing otherwise."""
    if _settled:
        print(f"{prog}: {_settled.pop()}", flush=True)


def core_list(cores: Sequence[int]) -> str:
    """Cores as a list in the form vLLM and /proc read: [0, 1, 2, 5] -> "0-2,5"."""
    if not cores:
        raise ValueError("a vLLM engine needs at least one core")
    ordered = sorted(set(int(c) for c in cores))
    runs: list[list[int]] = []
    for core in ordered:
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
