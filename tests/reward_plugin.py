"""Reward components for trainer tests, loaded through the `reward.plugins` config option.

A random model never answers correctly, so these give rewards that vary with the text itself:
deterministic, different across completions, and with gaps larger than AMIR's margin of 2.
"""

from __future__ import annotations

import zlib

from groupwise.rewards import Verdict, register_component


@register_component("text_hash")
def text_hash(completion: str, verdict: Verdict) -> float:
    """3.0 for about a third of texts, else 0.0."""
    return 3.0 if zlib.crc32(completion.encode()) % 3 == 0 else 0.0


@register_component("nan_for_tests")
def nan_for_tests(completion: str, verdict: Verdict) -> float:
    """A broken plugin: NaN for every completion (groupwise train must name it, not crash)."""
    return float("nan")
