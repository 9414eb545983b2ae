"""Host memory of a training process on a CPU: freed blocks kept for reuse, not returned.

glibc's malloc serves every block above its mmap threshold (at most 32 MiB) with a fresh
mmap and unmaps it on free, so each large tensor of a training step (logits, attention
inputs, the gradients of both) starts as untouched pages that the kernel faults in and zeroes
one 4 KiB page at a time. `keep_freed_memory` turns mmap off for new blocks and never trims
the heap, so the blocks of a step are reused by the next: the process keeps its peak memory
instead of handing it back between steps. Measured on 2 cores (SmolLM2-135M + LoRA, forward
and backward over 16 completions, bench/update_pass.py): 8.8 s -> 7.7 s; see
docs/guides/train.md, "Host memory".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# glibc malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
# Largest value glibc takes for the trim threshold (an int): never trim.
_NEVER = 2**31 - 1


def keep_freed_memory() -> bool:
    """Keep freed host memory in this process for reuse (glibc on Linux); True when set,
    False where the C library is not glibc (nothing changes there)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER))
