"""Held-out evaluation during training (`train.eval_every`, `data.heldout`), like TRL's
`eval_strategy="steps"`: the policy samples `train.eval_samples` completions for each held-out
problem before the first step, every `eval_every` steps and after the last, and the fraction
that is correct (pass@1, docs/algorithms.md §4) goes into that step's metrics.jsonl line
(`heldout_accuracy`) with the unbiased pass@k for k = 1, 2, 4, ..., n (`heldout_pass@k`) and,
when the prompt asks for a confidence, its calibration (docs/algorithms.md §6:
`heldout_brier`, `heldout_ece_mass`, ...); RUN/heldout.jsonl gets the correct count of every
problem and both tables with their bootstrap intervals over problems (step 0 is the policy
before training).

Each problem draws its samples from its own random stream, the same at every evaluation
(`groupwise.evaluation.sampling.problem_seed` of train.seed and the problem id): two
evaluations of a run differ only by the policy, so their difference is paired problem by
problem (`accuracy_difference`). Several processes split the problems and gather the counts,
so the numbers do not depend on the process count.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from groupwise import metrics
from groupwise.data import MixPart, Problem, get_template, load_mix, render_prompt
from groupwise.evaluation.sampling import problem_seed
from groupwise.metrics import Difference, accuracy_difference, doubling_ks
from groupwise.rollout import SamplingParams
from groupwise.run_reader import HELDOUT_FILE, read_heldout
from groupwise.train.metrics_log import JsonlLog

if TYPE_CHECKING:
    from groupwise.rewards import RewardSuite
    from groupwise.rollout import Generator
    from groupwise.train.config import Config
    from groupwise.train.distributed import Distributed

__all__ = [
    "CALIBRATION_METRICS",
    "HELDOUT_FILE",
    "Difference",
    "HeldoutEvaluation",
    "accuracy_difference",
    "read_heldout",
]

# Resamples of the problems for the interval of a difference; seeded, so it repeats exactly.
BOOTSTRAP = metrics.DIFFERENCE_BOOTSTRAP
# Problems per generator call of an evaluation: the bar's step (a vLLM batch of 16 x n).
CHUNK = 16


class HeldoutEvaluation:
    """Evaluates a training run's policy on its held-out problems and logs the results.

    problems: the held-out problems; prompts: each one's rendered prompt. generator: the
    run's generator (its inference copy is refreshed from the policy at every call). rewards:
    the run's reward suite (its answer checking decides what is correct, as in training). n:
    samples per problem. sampling: the rollout's temperature, top_p and max_new_tokens. seed:
    train.seed. every, last_step: train.eval_every and train.max_steps. dist: the run's
    processes. log: RUN/heldout.jsonl (rank 0) or None (the other processes). asks_confidence:
    the prompt asks for a verbalized confidence (data.prompt amir, amir_groupwise), so each
    evaluation also measures its calibration (docs/algorithms.md §6). progress: show a bar of
    the problems sampled and the accuracy so far (train.progress, rank 0).
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
        asks_confidence: bool = False,
        progress: bool = False,
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
        self.asks_confidence = asks_confidence
        self.progress = progress
        self.seed = seed
        self.ks = doubling_ks(n)

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
            asks_confidence=get_template(config.data.prompt).asks_confidence,
            progress=config.train.progress and dist.is_main,
        )

    def at(self, step: int, last: bool = False) -> dict[str, float]:
        """Evaluate the policy after `step` steps when due (step 0, before training; every
        train.eval_every steps; the last step, or `last`: the run's budget of completions is
        spent): the metrics for that step's metrics.jsonl line, {} when not due."""
        if step == 0 or step % self.every == 0 or step == self.last_step or last:
            return self.evaluate(step)
        return {}

    def evaluate(self, step: int) -> dict[str, float]:
        """Evaluate the policy as it is after `step` steps; writes heldout.jsonl's line and
        returns the metrics for metrics.jsonl: heldout_accuracy (fraction of samples correct),
        heldout_pass@k (unbiased, docs/algorithms.md §4, for each k of metrics.doubling_ks),
        heldout_problems, heldout_samples (per problem), seconds_heldout; with a prompt that
        asks for a confidence also heldout_confidence_coverage, heldout_brier,
        heldout_ece_mass, heldout_ece_width, heldout_auroc and heldout_overconfidence (those
        that are defined; docs/algorithms.md §6). heldout.jsonl gets the pass@k table and the
        calibration table with their bootstrap intervals over problems, and "seconds", the
        evaluation's wall time (the step-0 one included, which metrics.jsonl has no line for)."""
        from groupwise.metrics import pass_at_k_table

        started = time.perf_counter()
        counts, stated = self._sample_mine(step)
        correct_per_problem = [0] * len(self.problems)
        for part in self.dist.gather(counts):
            for index, count in part:
                correct_per_problem[index] = int(count)
        accuracy = sum(correct_per_problem) / (len(self.problems) * self.n)
        passes = pass_at_k_table(correct_per_problem, self.n, self.ks, seed=self.seed)
        metrics: dict[str, float] = {"heldout_accuracy": accuracy}
        metrics.update({f"heldout_pass@{k}": passes[f"pass@{k}"] for k in self.ks})
        line: dict[str, Any] = {
            "step": step,
            "accuracy": accuracy,
            "n": self.n,
            "problem_ids": [p.id for p in self.problems],
            "correct": correct_per_problem,
            "pass_at_k": passes,
        }
        if self.asks_confidence:
            table = self._calibration([s for part in self.dist.gather(stated) for s in part])
            line["calibration"] = table
            metrics.update(
                {
                    f"heldout_{name}": table[key]
                    for key, name in CALIBRATION_METRICS.items()
                    if table[key] is not None
                }
            )
        seconds = time.perf_counter() - started
        if self.log is not None:
            self.log.write({**line, "seconds": seconds})
        return {
            **metrics,
            "heldout_problems": len(self.problems),
            "heldout_samples": self.n,
            "seconds_heldout": seconds,
        }

    def _sample_mine(
        self, step: int
    ) -> tuple[list[tuple[int, int]], list[tuple[int, list[float | None], list[int]]]]:
        """This process's share of the problems, sampled and checked: (problem index, correct
        count) of each, and (index, stated confidences, correctness per sample) when the
        prompt asks for a confidence. The problems go to the generator CHUNK at a time, so the
        bar moves; each problem's samples come from its own seed, so the chunks change
        nothing."""
        mine = list(range(self.dist.rank, len(self.problems), self.dist.world_size))
        counts: list[tuple[int, int]] = []
        stated: list[tuple[int, list[float | None], list[int]]] = []
        bar = tqdm(
            total=len(mine),
            disable=not self.progress,
            desc=f"held-out at step {step}",
            unit="problem",
            leave=False,
            dynamic_ncols=True,
        )
        right = 0
        for start in range(0, len(mine), CHUNK):
            chunk = mine[start : start + CHUNK]
            rollouts = self.generator.generate(
                [self.prompts[i] for i in chunk],
                self.n,
                self.sampling,
                prompt_seeds=[self.seeds[i] for i in chunk],
            )
            golds = [self.problems[i].answer for i in chunk for _ in range(self.n)]
            correct = self.rewards.score(rollouts.texts, golds).correct.view(-1, self.n)
            counts += zip(chunk, correct.sum(dim=1).tolist(), strict=True)
            if self.asks_confidence:
                stated += _stated_confidences(chunk, rollouts.texts, correct.tolist(), self.n)
            right += int(correct.sum())
            bar.update(len(chunk))
            bar.set_postfix(accuracy=f"{right / ((start + len(chunk)) * self.n):.1%}")
        bar.close()
        return counts, stated

    def _calibration(
        self, stated: Sequence[tuple[int, list[float | None], list[int]]]
    ) -> dict[str, Any]:
        """groupwise.calibration.calibration_table of every held-out sample, problem order."""
        from groupwise.calibration import calibration_table

        confidence, correct, problems = [], [], []
        for index, values, flags in sorted(stated):
            confidence += values
            correct += flags
            problems += [self.problems[index].id] * len(values)
        return calibration_table(confidence, correct, problems, seed=self.seed)


# calibration_table key -> metrics.jsonl name (after "heldout_")
CALIBRATION_METRICS = {
    "coverage": "confidence_coverage",
    "brier": "brier",
    "ece_mass": "ece_mass",
    "ece_width": "ece_width",
    "auroc": "auroc",
    "overconfidence": "overconfidence",
}


def _stated_confidences(
    indices: Sequence[int], texts: Sequence[str], correct: Sequence[Sequence[bool]], n: int
) -> list[tuple[int, list[float | None], list[int]]]:
    """(problem index, each sample's stated confidence or None, each sample's correctness)."""
    from groupwise.rewards import parse_confidence

    return [
        (
            index,
            [parse_confidence(texts[row * n + j]) for j in range(n)],
            [int(flag) for flag in correct[row]],
        )
        for row, index in enumerate(indices)
    ]


def _former_mean_interval(
    values: Sequence[float], confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    low, high = metrics.mean_interval(values, confidence, BOOTSTRAP, seed)
    return float(low), float(high)


def __getattr__(name: str) -> Any:
    """The former `mean_interval(values, confidence, seed)` (BOOTSTRAP resamples), with a
    deprecation note: groupwise.metrics.mean_interval is the one mean interval now."""
    if name != "mean_interval":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        "groupwise.train.heldout.mean_interval is deprecated: use "
        "groupwise.metrics.mean_interval(values, confidence, bootstrap=10_000, seed=seed)",
        DeprecationWarning,
        stacklevel=2,
    )
    return _former_mean_interval
