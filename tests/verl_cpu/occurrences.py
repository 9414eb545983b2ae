"""The count of a run's sampling requests per (weights' step, prompt), over all rollout replicas:
one named Ray actor (`OCCURRENCES`) that the CPU rollout's servers share (verl_cpu.rollout).
Its own module, importing Ray alone: the actor's process loads only this."""

from __future__ import annotations

from collections import Counter

import ray

OCCURRENCES = "hf_cpu_occurrences"
"""The name of the run's one `Occurrences` actor."""


@ray.remote(num_cpus=0)
class Occurrences:
    """How many requests each (weights' step, prompt) has had, over all replicas of a run."""

    def __init__(self) -> None:
        self.seen: Counter = Counter()

    def take(self, key: tuple[int, tuple[int, ...]]) -> int:
        """The number of earlier requests with `key`, counting this one from now on."""
        self.seen[key] += 1
        return self.seen[key] - 1
