"""The incorrect solutions to judge (`select_items`, each cut into steps) and judging them
all (`judge_items`): cached answers first, then each distinct question once, in parallel
threads for a remote judge."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from groupwise.analysis.error_position.cache import JudgeCache
from groupwise.analysis.error_position.judges import Judge, JudgeOutcome, judge_solution
from groupwise.analysis.error_position.protocol import Judgement, Message, judge_messages
from groupwise.analysis.error_position.segmentation import segment_steps
from groupwise.analysis.error_position.taxonomy import ErrorType
from groupwise.records import Sample, SavedProblem


@dataclass(frozen=True)
class ErrorItem:
    """One incorrect solution to be judged, and its outcome once judged."""

    run: str
    sample: Sample
    steps: list[str]
    judgement: Judgement | None = None
    error: str | None = None
    attempts: int = 0
    cached: bool = False

    @property
    def relative_position(self) -> float | None:
        """k / (number of steps) of the first erroneous step k, in (0, 1]."""
        return None if self.judgement is None else self.judgement.step / len(self.steps)


def judge_items(
    items: Sequence[ErrorItem],
    problems: Mapping[str, Mapping[Any, SavedProblem]],
    judge: Judge,
    taxonomy: Sequence[ErrorType],
    cache: JudgeCache,
    attempts: int = 3,
    backoff: float = 2.0,
    workers: int = 1,
    progress: bool = True,
) -> list[ErrorItem]:
    """Judge every item: cached answers first, then each distinct question once (in parallel
    threads for remote judges; identical solutions of the same problem share one answer).

    `problems[run][(benchmark, id)]` gives the question; an item with no steps or no saved
    question is a failure with that reason. Returns the items with outcomes, in input order.
    """
    from tqdm import tqdm

    done: list[ErrorItem | None] = [None] * len(items)
    questions: dict[str, tuple[list[Message], list[int]]] = {}  # key -> (messages, item rows)
    for row, item in enumerate(items):
        problem = problems.get(item.run, {}).get(item.sample.key)
        if problem is None:
            done[row] = replace(item, error="no saved problem text (problems.jsonl)")
        elif not item.steps:
            done[row] = replace(item, error="empty solution: no steps")
        else:
            messages = judge_messages(problem.question, item.sample.gold, item.steps, taxonomy)
            key = JudgeCache.key(judge.name, messages)
            cached = cache.get(key)
            if cached is not None:
                done[row] = replace(item, judgement=cached, cached=True)
            else:
                questions.setdefault(key, (messages, []))[1].append(row)

    def ask(key: str) -> tuple[str, JudgeOutcome]:
        messages, rows = questions[key]
        first = items[rows[0]]
        outcome = judge_solution(judge, messages, len(first.steps), taxonomy, attempts, backoff)
        s = first.sample
        cache.put(
            key,
            {
                "run": first.run,
                "benchmark": s.benchmark,
                "problem_id": s.problem_id,
                "sample": s.sample,
                "num_steps": len(first.steps),
                "step": outcome.judgement.step if outcome.judgement else None,
                "type": outcome.judgement.type if outcome.judgement else None,
                "error": outcome.error,
                "attempts": outcome.attempts,
                "reply": outcome.reply,
            },
        )
        return key, outcome

    failures = 0
    with (
        ThreadPoolExecutor(max_workers=max(1, workers)) as pool,
        tqdm(total=len(questions), desc="judging", disable=not progress) as bar,
    ):
        for key, outcome in pool.map(ask, list(questions)):
            for row in questions[key][1]:
                done[row] = replace(
                    items[row],
                    judgement=outcome.judgement,
                    error=outcome.error,
                    attempts=outcome.attempts,
                )
            failures += outcome.judgement is None
            bar.update(1)
            bar.set_postfix(failures=failures)
    return [d for d in done if d is not None]


def select_items(
    runs_samples: Mapping[str, Iterable[Sample]], min_steps: int, max_per_run: int | None, seed: int
) -> list[ErrorItem]:
    """The incorrect solutions of each run (a random `max_per_run` of them if given), cut into
    steps."""
    items: list[ErrorItem] = []
    for name, samples in runs_samples.items():
        wrong = [s for s in samples if not s.correct]
        if max_per_run is not None and len(wrong) > max_per_run:
            wrong = random.Random(seed).sample(wrong, max_per_run)
        items += [ErrorItem(name, s, segment_steps(s.completion, min_steps)) for s in wrong]
    return items
