"""Freed host memory kept for reuse on a CPU (groupwise.train.host_memory; docs/guides/train.md,
"Host memory").

What the setting does, read from the C library itself rather than from page faults (which
depend on the kernel and on what else the process allocated): a 64 MiB block comes from the
main heap instead of a fresh mapping, and freeing it leaves the heap's end where it was, so the
next block of that size is served from memory the process already holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

# In a fresh process (the setting is process-wide): where a 64 MiB block lies, and the program
# break (the heap's end) before and after it is freed, with glibc's defaults and after
# keep_freed_memory.
SCRIPT = textwrap.dedent(
    """
    import ctypes, ctypes.util, json
    from groupwise.train.host_memory import keep_freed_memory

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]
    libc.sbrk.restype, libc.sbrk.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t]

    def heap_start():
        for line in open("/proc/self/maps"):
            if line.rstrip().endswith("[heap]"):
                return int(line.split("-")[0], 16)

    def one_block():
        block = libc.malloc(64 << 20)
        end = libc.sbrk(0)
        in_heap = heap_start() <= block and block + (64 << 20) <= end
        libc.free(block)
        return {"in_heap": in_heap, "end_kept": libc.sbrk(0) == end}

    default = one_block()
    kept = keep_freed_memory()
    print(json.dumps([default, kept, one_block()]))
    """
)


def test_freed_blocks_stay_in_the_heap_for_reuse():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], check=True, capture_output=True, text=True
    ).stdout
    default, kept, after = json.loads(out.splitlines()[-1])
    # glibc's default serves a block above its mmap threshold (at most 32 MiB) with a mapping
    # of its own, unmapped on free
    assert default["in_heap"] is False
    assert kept is True
    assert after == {"in_heap": True, "end_kept": True}
