"""Which questions a training step sees: a pure function of (seed, step)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class ProblemSampler(Generic[T]):
    """Walks the problems in epochs, each a seeded permutation (or the file order).

    A draw takes positions [p, p + q) of the endless concatenation of epochs; step s draws once
    at p = s * q, unless dynamic sampling draws more (the trainer then saves p). Two runs with
    the same seed see the same questions in the same order.
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
        """The questions of step `step` when every step draws once."""
        return self.questions(step * self.per_step)

    def questions(self, start: int) -> list[T]:
        """per_step questions from data position `start` (dynamic sampling draws several times
        per step: the position is then the questions drawn so far, a saved number)."""
        n = len(self.problems)
        positions = range(start, start + self.per_step)
        return [self.problems[self._order(pos // n)[pos % n]] for pos in positions]

    def epoch(self, position: int) -> float:
        """Epochs of data drawn at data position `position`."""
        return position / len(self.problems)
