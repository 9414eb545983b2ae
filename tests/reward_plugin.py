"""Reward components (and an advantage estimator) for trainer tests, loaded through the
`reward.plugins` config option.

A random model never answers correctly, so these give rewards that vary with the text itself:
deterministic, different across completions, and with gaps larger than AMIR's margin of 2.
"""

from __future__ import annotations

import zlib

from groupwise.algorithms import Advantages, AdvantageSettings, GroupRewards
from groupwise.algorithms import register_advantage_estimator as register_estimator
from groupwise.rewards import Verdict, register_component


@register_component("text_hash")
def text_hash(completion: str, verdict: Verdict) -> float:
    """3.0 for about a third of texts, else 0.0."""
    return 3.0 if zlib.crc32(completion.encode()) % 3 == 0 else 0.0


@register_component("nan_for_tests")
def nan_for_tests(completion: str, verdict: Verdict) -> float:
    """A broken plugin: NaN for every completion (groupwise train must name it, not crash)."""
    return float("nan")


@register_estimator("plugin_centered")
def plugin_centered(batch: GroupRewards, settings: AdvantageSettings) -> Advantages:
    """A plugin's estimator: rewards minus their group mean (Dr.GRPO without the std)."""
    grouped = batch.rewards.reshape(-1, batch.group_size)
    advantages = (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)
    return Advantages(advantages, batch.rewards)
