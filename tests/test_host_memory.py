"""Freed host memory kept for reuse on a CPU (groupwise.train.host_memory; docs/guides/train.md,
"Host memory")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

# Page faults of five 64 MiB tensors made and freed one after another, before and after
# keep_freed_memory (each in the same process: the setting is process-wide).
SCRIPT = textwrap.dedent(
    """
    import json, resource, torch
    from groupwise.train.host_memory import keep_freed_memory

    def faults():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(5):
            torch.ones(1 << 24).sum()
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults()
    default = faults()
    kept = keep_freed_memory()
    faults()  # the heap grows to the block once
    print(json.dumps([default, kept, faults()]))
    """
)


def test_freed_blocks_are_reused_without_page_faults():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], check=True, capture_output=True, text=True
    ).stdout
    default, kept, after = json.loads(out.splitlines()[-1])
    # glibc's default maps every 64 MiB block afresh: 16,384 faults of 4 KiB pages each
    assert kept is True
    assert default >= 5 * 16384 * 0.9
    assert after < 0.01 * default
