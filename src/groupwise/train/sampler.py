"""Which questions a training step sees: a pure function of (seed, step)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class ProblemSampler(Generic[T]):
    """Walks the problems in epochs, each a seeded permutation (or the file order).

    Step s takes positions [s * q, (s + 1) * q) of the endless concatenation of epochs, so the
    data position is the step itself: resuming at step s needs no other saved state, and two
    runs with the same seed see the same questions in the same order.
    """

    def __init__(self, problems: Sequence[T], per_step: int, seed: int, shuffle: bool = True):
        if not problems:
            raise ValueError("no problems to train on (the dataset is empty)")
        self.problems = problems
        self.per_step = per_step
        self.seed = seed
        self.shuffle = shuffle
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.problems)))
            if self.shuffle:
                random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._orders = {epoch: order}  # only the current epoch is ever needed again
        return self._orders[epoch]

    def batch(self, step: int) -> list[T]:
        n = len(self.problems)
        start = step * self.per_step
        positions = range(start, start + self.per_step)
        return [self.problems[self._order(pos // n)[pos % n]] for pos in positions]

    def epoch(self, step: int) -> float:
        return step * self.per_step / len(self.problems)
