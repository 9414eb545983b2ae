"""Held-out evaluation during training (`train.eval_every`, `data.heldout`), like TRL's
`eval_strategy="steps"`: the policy samples `train.eval_samples` completions for each held-out
problem before the first step, every `eval_every` steps and after the last, and the fraction
that is correct (pass@1, docs/algorithms.md §4) goes into that step's metrics.jsonl line
(`heldout_accuracy`) and, with the correct count of every problem, into RUN/heldout.jsonl
(step 0 is the policy before training).

Each problem draws its samples from its own random stream, the same at every evaluation
(`groupwise.evaluation.sampling.problem_seed` of train.seed and the problem id): two
evaluations of a run differ only by the policy, so their difference is paired problem by
problem (`accuracy_difference`). Several processes split the problems and gather the counts,
so the numbers do not depend on the process count.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from groupwise.data import MixPart, Problem, load_mix, render_prompt
from groupwise.evaluation.sampling import problem_seed
from groupwise.records import read_jsonl
from groupwise.rollout import SamplingParams
from groupwise.train.metrics_log import JsonlLog

if TYPE_CHECKING:
    from groupwise.rewards import RewardSuite
    from groupwise.rollout import Generator
    from groupwise.train.config import Config
    from groupwise.train.distributed import Distributed

__all__ = [
    "HELDOUT_FILE",
    "Difference",
    "HeldoutEvaluation",
    "accuracy_difference",
    "mean_interval",
    "read_heldout",
]

HELDOUT_FILE = "heldout.jsonl"
# Resamples of the problems for the interval of a difference; seeded, so it repeats exactly.
BOOTSTRAP = 10_000


class HeldoutEvaluation:
    """Evaluates a training run's policy on its held-out problems and logs the results.

    problems: the held-out problems; prompts: each one's rendered prompt. generator: the
    run's generator (its inference copy is refreshed from the policy at every call). rewards:
    the run's reward suite (its answer checking decides what is correct, as in training). n:
    samples per problem. sampling: the rollout's temperature, top_p and max_new_tokens. seed:
    train.seed. every, last_step: train.eval_every and train.max_steps. dist: the run's
    processes. log: RUN/heldout.jsonl (rank 0) or None (the other processes).
    """

    def __init__(
        self,
        problems: Sequence[Problem],
        prompts: Sequence[str],
        generator: Generator,
        rewards: RewardSuite,
        n: int,
        sampling: SamplingParams,
        seed: int,
        every: int,
        last_step: int,
        dist: Distributed,
        log: JsonlLog | None,
    ) -> None:
        self.problems = list(problems)
        self.prompts = list(prompts)
        self.generator = generator
        self.rewards = rewards
        self.n = n
        self.sampling = sampling
        self.seeds = [problem_seed(seed, "heldout", p.id) for p in self.problems]
        self.every = every
        self.last_step = last_step
        self.dist = dist
        self.log = log

    @classmethod
    def from_config(
        cls,
        config: Config,
        generator: Generator,
        tokenizer: Any,
        rewards: RewardSuite,
        dist: Distributed,
        run_dir: Path,
        resume_step: int | None,
    ) -> HeldoutEvaluation | None:
        """The run's evaluation, or None when train.eval_every is 0. resume_step: the step a
        resumed run continues from (its heldout.jsonl is cut back to it), None for a new run."""
        if config.train.eval_every == 0:
            return None
        part = MixPart.from_dict(config.data.heldout, "data.heldout")  # checked at load
        problems = load_mix([part], config.data.data_dir)
        rollout = config.rollout
        log = JsonlLog(Path(run_dir) / HELDOUT_FILE, resume_step) if dist.is_main else None
        return cls(
            problems,
            [render_prompt(p, config.data.prompt, tokenizer) for p in problems],
            generator,
            rewards,
            config.train.eval_samples,
            SamplingParams(
                temperature=rollout.temperature,
                top_p=rollout.top_p,
                max_new_tokens=rollout.max_new_tokens,
            ),
            config.train.seed,
            config.train.eval_every,
            config.train.max_steps,
            dist,
            log,
        )

    def at(self, step: int) -> dict[str, float]:
        """Evaluate the policy after `step` steps when due (step 0, before training; every
        train.eval_every steps; the last step): the metrics for that step's metrics.jsonl line,
        {} when not due."""
        if step == 0 or step % self.every == 0 or step == self.last_step:
            return self.evaluate(step)
        return {}

    def evaluate(self, step: int) -> dict[str, float]:
        """Evaluate the policy as it is after `step` steps; writes heldout.jsonl's line and
        returns the metrics for metrics.jsonl: heldout_accuracy (fraction of samples correct),
        heldout_problems, heldout_samples (per problem), seconds_heldout."""
        started = time.perf_counter()
        mine = list(range(self.dist.rank, len(self.problems), self.dist.world_size))
        counts: list[tuple[int, int]] = []
        if mine:
            rollouts = self.generator.generate(
                [self.prompts[i] for i in mine],
                self.n,
                self.sampling,
                prompt_seeds=[self.seeds[i] for i in mine],
            )
            golds = [self.problems[i].answer for i in mine for _ in range(self.n)]
            correct = self.rewards.score(rollouts.texts, golds).correct.view(-1, self.n)
            counts = list(zip(mine, correct.sum(dim=1).tolist(), strict=True))
        correct_per_problem = [0] * len(self.problems)
        for part in self.dist.gather(counts):
            for index, count in part:
                correct_per_problem[index] = int(count)
        accuracy = sum(correct_per_problem) / (len(self.problems) * self.n)
        if self.log is not None:
            self.log.write(
                {
                    "step": step,
                    "accuracy": accuracy,
                    "n": self.n,
                    "problem_ids": [p.id for p in self.problems],
                    "correct": correct_per_problem,
                }
            )
        return {
            "heldout_accuracy": accuracy,
            "heldout_problems": len(self.problems),
            "heldout_samples": self.n,
            "seconds_heldout": time.perf_counter() - started,
        }


def read_heldout(run_dir: str | Path) -> list[dict[str, Any]]:
    """RUN/heldout.jsonl's evaluations in step order ([] when the run has none); a line that
    cannot be read is an error naming the file and line."""
    path = Path(run_dir) / HELDOUT_FILE
    if not path.is_file():
        return []
    rows, _ = read_jsonl(path)
    for number, row in rows:
        if not isinstance(row, dict) or not {"step", "correct", "n"} <= set(row):
            raise ValueError(f"{path}:{number}: expected an object with step, correct and n")
    return sorted((row for _, row in rows), key=lambda row: row["step"])


def mean_interval(
    values: Sequence[float], confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (one number per problem),
    resampling the problems BOOTSTRAP times with a numpy generator seeded with `seed`."""
    data = np.asarray(values, dtype=np.float64)
    if data.ndim != 1 or data.size == 0:
        raise ValueError("mean_interval needs a non-empty list of numbers, one per problem")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(BOOTSTRAP, data.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Difference:
    """after - before in accuracy (fractions) with its 95 % interval: a percentile bootstrap
    over problems, each problem's before and after kept together (paired)."""

    before: float
    after: float
    low: float
    high: float

    @property
    def delta(self) -> float:
        return self.after - self.before


def accuracy_difference(
    before: Sequence[int], after: Sequence[int], n: int, confidence: float = 0.95
) -> Difference:
    """The difference in accuracy between two evaluations of the same problems with n samples
    each (correct counts per problem, in the same problem order) and its interval
    (`mean_interval` of the per-problem differences)."""
    if len(before) != len(after) or not before:
        raise ValueError(
            f"accuracy_difference: {len(before)} and {len(after)} problems; need the same "
            "non-empty problems in both evaluations"
        )
    diff = (np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)) / n
    low, high = mean_interval(diff, confidence)
    return Difference(
        before=float(np.mean(before)) / n, after=float(np.mean(after)) / n, low=low, high=high
    )
