"""The sampler's side of a training step: each step's questions, their rollouts and their
scores, as one scored batch for the learner (train/learner.py). With rollout.staleness=1 the
next step's batch is sampled while the current one is learned (docs/guides/train.md, "Sampling
ahead of learning").

    questions (the data position) -> rollout (the generator) -> score (reward columns,
    gathered in question order) [-> dynamic sampling: draw again until the step has its groups]

Sampling ahead: when a step's batch is handed out, the sampler takes the policy's weights as
they are then (before that step's update) and samples the next step's batch in a background
thread; the learner's update runs meanwhile. The next step then learns on completions that are
one update old (staleness 1): its logp_old is the trainer's own pass at its current weights,
the sampler's log-probs measure the gap and, with rollout.importance_correction, correct it
(docs/algorithms.md, "Rollout correction"). A batch sampled ahead is saved in the checkpoint
(its rollouts and data position) and scored again on resume, so a stopped run continues as an
uninterrupted one would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from groupwise.algorithms import kept_groups, soft_overlong_punishment
from groupwise.data import render_prompt
from groupwise.errors import NonFiniteError
from groupwise.rewards import RewardSuite, Scores
from groupwise.rollout import Generator, Rollouts, SamplingParams
from groupwise.train.batch import ScoredBatch, concat_scores, take_scores, with_column
from groupwise.train.config import Config
from groupwise.train.distributed import Distributed
from groupwise.train.draws import Draw, assemble, choose_groups, warn_if_filled
from groupwise.train.sampler import ProblemSampler

__all__ = ["BatchSource", "SampledStep"]


@dataclass(frozen=True)
class SampledStep:
    """A step's problems and scored batch; what sampling it cost (completions_sampled, with
    dynamic sampling the draws and groups kept and dropped, staleness: the updates between the
    weights that sampled it and the weights that learn it); the seconds the step waited for
    its completions (all of their generation when sampled in the step, the rest of it when
    sampled ahead)."""

    problems: list[Any]
    batch: ScoredBatch
    cost: dict[str, float]
    seconds_generation: float


@dataclass
class _Ahead:
    """A batch being sampled ahead: its data position, problems and the thread's result
    (rollouts, seconds of generation)."""

    position: int
    problems: list[Any]
    result: Future[tuple[Rollouts, float]]


class BatchSource:
    """Samples and scores each step's batch; position is the data position: questions handed
    out to steps so far (a batch sampled ahead is not counted until its step takes it)."""

    def __init__(
        self,
        config: Config,
        problems: ProblemSampler,
        generator: Generator,
        tokenizer: PreTrainedTokenizerBase,
        rewards: RewardSuite,
        dist: Distributed,
        divergence_hint: Callable[[], str],
    ) -> None:
        self.config, self.problems, self.generator = config, problems, generator
        self.tokenizer, self.rewards, self.dist = tokenizer, rewards, dist
        self.divergence_hint = divergence_hint
        self.position = 0
        self.step = 0  # steps taken so far: the error of a diverged rollout names the next
        self._ahead: _Ahead | None = None
        self._thread: ThreadPoolExecutor | None = None

    def next(self) -> SampledStep:
        """The next step's batch: the one sampled ahead when there is one, else sampled now."""
        self.step += 1
        if self._ahead is not None:
            return self._take_ahead()
        cfg = self.config.rollout
        count, minibatches = cfg.questions_per_step, self.config.algorithm.minibatches
        questions = self.dist.question_shard(count, minibatches)
        slots = [
            self.dist.question_shard(count, minibatches, rank)
            for rank in range(self.dist.world_size)
        ]
        draws: list[Draw] = []
        generation = 0.0
        while True:
            problems = self.problems.questions(self.position)
            started = time.perf_counter()
            rollouts = self.rollout(problems, questions, self.position)
            generation += time.perf_counter() - started
            batch = self.score(problems, questions, rollouts)
            self.position += count
            if not cfg.dynamic_sampling:
                cost = {"completions_sampled": len(batch.texts), "staleness": 0}
                return SampledStep(problems, batch, cost, generation)
            draws.append(Draw(problems, batch, self._keep(batch)))
            chosen = choose_groups(draws, slots, fill=len(draws) == cfg.max_draws)
            if chosen:
                step = assemble(draws, chosen, questions)
                warn_if_filled(step.metrics, cfg.max_draws)
                return SampledStep(step.problems, step.batch, step.metrics, generation)

    # -----------------------------------------------------------------------------------------
    # Sampling ahead (rollout.staleness=1: one process, the vllm engine, no dynamic sampling)

    def sample_ahead(self) -> None:
        """Start sampling the next step's batch with the policy's weights as they are now, in a
        background thread. Call it before the update that the batch is to be one behind."""
        if self._ahead is not None:
            raise RuntimeError("a batch is already being sampled ahead")
        self.generator.sync()  # the weights now, before the update starts changing them
        self._thread = self._thread or ThreadPoolExecutor(1, thread_name_prefix="sampler")
        problems = self.problems.questions(self.position)
        questions = list(range(len(problems)))
        position = self.position

        def sample() -> tuple[Rollouts, float]:
            started = time.perf_counter()
            rollouts = self.rollout(problems, questions, position, sync=False)
            return rollouts, time.perf_counter() - started

        self._ahead = _Ahead(position, problems, self._thread.submit(sample))

    def settle(self) -> None:
        """Wait until the batch being sampled ahead (if any) is complete: before anything else
        uses the generator (a held-out evaluation) and before a checkpoint saves it."""
        if self._ahead is not None:
            self._ahead.result.result()

    def _take_ahead(self) -> SampledStep:
        ahead, self._ahead = self._ahead, None
        assert ahead is not None
        started = time.perf_counter()
        rollouts, seconds = ahead.result.result()
        waited = time.perf_counter() - started
        questions = list(range(len(ahead.problems)))
        batch = self.score(ahead.problems, questions, rollouts)
        self.position = ahead.position + len(ahead.problems)
        cost = {
            "completions_sampled": len(batch.texts),
            "staleness": 1,
            "seconds_sampling_ahead": seconds,
        }
        return SampledStep(ahead.problems, batch, cost, waited)

    def ahead_state(self) -> dict[str, Any] | None:
        """The batch sampled ahead, for a checkpoint: its data position and rollouts (tensors,
        texts and numbers only: the checkpoint is read weights-only); None without one."""
        if self._ahead is None:
            return None
        self.settle()
        rollouts, _ = self._ahead.result.result()
        values = {f.name: getattr(rollouts, f.name) for f in fields(rollouts)}
        return {"position": self._ahead.position, "rollouts": values}

    def load_ahead_state(self, state: dict[str, Any] | None) -> None:
        """Restore a checkpoint's batch sampled ahead (ahead_state): the next step learns the
        completions an uninterrupted run would have."""
        if state is None:
            return
        rollouts = Rollouts(**state["rollouts"])
        done: Future[tuple[Rollouts, float]] = Future()
        done.set_result((rollouts, 0.0))  # its seconds were spent before the stop
        position = int(state["position"])
        self._ahead = _Ahead(position, self.problems.questions(position), done)

    def close(self) -> None:
        """Let a batch being sampled finish (the engine is not interrupted) and stop the
        thread."""
        self.settle()
        if self._thread is not None:
            self._thread.shutdown()
            self._thread = None

    # -----------------------------------------------------------------------------------------
    # Rollout and score

    def rollout(
        self, problems: list[Any], questions: list[int], position: int, sync: bool = True
    ) -> Rollouts:
        """This process's completions: group_size of each of its questions, in that order;
        position: the data position of problems[0]. sync=False: the vllm engine samples with
        the weights it holds (sample_ahead synced them)."""
        cfg = self.config
        prompts = [render_prompt(problems[q], cfg.data.prompt, self.tokenizer) for q in questions]
        sampling = SamplingParams(  # the same settings whichever engine samples
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
            max_new_tokens=cfg.rollout.max_new_tokens,
        )
        # One random stream per question, keyed by its data position: the same samples
        # whichever process draws them.
        seeds = [cfg.train.seed * 1_000_003 + position + q for q in questions]
        extra = {} if sync else {"sync": False}
        try:
            return self.generator.generate(
                prompts, cfg.rollout.group_size, sampling, prompt_seeds=seeds, **extra
            )
        except NonFiniteError as err:
            raise err.at_step(self.step, self.divergence_hint()) from None

    def score(self, problems: list[Any], questions: list[int], rollouts: Rollouts) -> ScoredBatch:
        """Rewards of this process's completions, then the whole batch's, in question order."""
        group_size = self.config.rollout.group_size
        golds = [problems[q].answer for q in questions for _ in range(group_size)]
        scores = self.rewards.score(rollouts.texts, golds)
        if self.config.reward.overlong_buffer:
            scores = self._with_overlong(scores, rollouts)
        offsets = torch.arange(group_size)
        rows = (torch.tensor(questions).unsqueeze(1) * group_size + offsets).reshape(-1)
        parts = self.dist.gather((rows, scores, rollouts.texts, rollouts.truncated))
        order = torch.argsort(torch.cat([part[0] for part in parts]))
        texts = [text for part in parts for text in part[2]]
        return ScoredBatch(
            rollouts=rollouts,
            rows=rows,
            scores=take_scores(concat_scores([part[1] for part in parts]), order),
            texts=[texts[i] for i in order.tolist()],
            truncated=torch.cat([part[3] for part in parts])[order],
        )

    def _keep(self, batch: ScoredBatch) -> torch.Tensor:
        """[Q] bool: the draw's groups that dynamic sampling keeps (groupwise.algorithms
        .kept_groups on rollout.filter_metric)."""
        return kept_groups(
            batch.scores.correct,
            batch.scores.total,
            self.config.rollout.group_size,
            metric=self.config.rollout.filter_metric,
            lens_mode=self.config.algorithm.lens_mode,
        )

    def _with_overlong(self, scores: Scores, rollouts: Rollouts) -> Scores:
        """The reward column "overlong": DAPO's soft overlong punishment of each completion's
        length, weighted by reward.overlong_penalty (docs/algorithms.md, "Overlong
        completions")."""
        reward = self.config.reward
        punishment = soft_overlong_punishment(
            rollouts.completion_lengths, self.config.rollout.max_new_tokens, reward.overlong_buffer
        )
        return with_column(scores, "overlong", punishment, reward.overlong_penalty)
