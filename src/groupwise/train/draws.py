"""A step's batch from several draws of questions: dynamic sampling's bookkeeping
(docs/algorithms.md, "Dynamic sampling"; the decision which groups to keep is
groupwise.algorithms.kept_groups).

A draw is questions_per_step questions, sampled and scored like one step without dynamic
sampling; `assemble` builds the step's batch from the kept groups of the draws so far. Each
process trains on its own questions of every mini-batch (train.distributed.question_shard), so
each fills its own slots of the step with kept groups it sampled itself, in draw order: no
rollout moves between processes, and the step is complete when every process has its share.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from groupwise.algorithms import group_types
from groupwise.rollout import Rollouts
from groupwise.train.batch import ScoredBatch, concat_scores, take_scores


@dataclass(frozen=True)
class Draw:
    """One draw: its problems (Q, in question order), the whole draw's scored batch (its
    rollouts: this process's questions of it) and which of its Q groups the filter keeps ([Q]
    bool)."""

    problems: list[Any]
    batch: ScoredBatch
    keep: torch.Tensor


@dataclass(frozen=True)
class Assembled:
    """The step's problems (Q, in question order) and scored batch, and what it cost."""

    problems: list[Any]
    batch: ScoredBatch
    metrics: dict[str, int]


def choose_groups(draws: list[Draw], slots: list[list[int]], fill: bool) -> list[tuple[int, int]]:
    """(draw, question) for each of the step's Q question slots, or [] when some process has
    fewer kept groups than slots and `fill` is False. slots[r]: process r's question indices
    (question_shard), the same in every draw: a process fills its slots with the groups of
    its own questions, kept ones in draw order; with `fill`, a process short of kept groups
    takes its dropped ones after them, in draw order."""
    chosen: list[tuple[int, int]] = [(-1, -1)] * sum(len(questions) for questions in slots)
    for questions in slots:
        mine = [(d, q) for d in range(len(draws)) for q in questions]
        kept = [(d, q) for d, q in mine if draws[d].keep[q]]
        if len(kept) < len(questions) and not fill:
            return []
        dropped = [(d, q) for d, q in mine if not draws[d].keep[q]]
        for slot, pick in zip(questions, kept + dropped, strict=False):
            chosen[slot] = pick
    return chosen


def assemble(draws: list[Draw], chosen: list[tuple[int, int]], mine: list[int]) -> Assembled:
    """The step's batch: whole-batch scores in slot order, this process's rollouts of its slots
    `mine` (its question_shard), and the cost metrics of the draws."""
    group_size = draws[0].batch.rollouts.group_size
    per_draw = len(draws[0].problems)
    scores = concat_scores([draw.batch.scores for draw in draws])
    offsets = torch.arange(group_size)
    order = torch.cat([(d * per_draw + q) * group_size + offsets for d, q in chosen])
    texts = [text for draw in draws for text in draw.batch.texts]
    truncated = torch.cat([draw.batch.truncated for draw in draws])
    local = [(draws[d], mine.index(q)) for d, q in (chosen[slot] for slot in mine)]
    rows = (torch.tensor(mine).unsqueeze(1) * group_size + offsets).reshape(-1)
    batch = ScoredBatch(
        rollouts=select_groups([(draw.batch.rollouts, i) for draw, i in local]),
        rows=rows,
        scores=take_scores(scores, order),
        texts=[texts[i] for i in order.tolist()],
        truncated=truncated[order],
    )
    problems = [draws[d].problems[q] for d, q in chosen]
    return Assembled(problems, batch, draw_metrics(draws, chosen))


def draw_metrics(draws: list[Draw], chosen: list[tuple[int, int]]) -> dict[str, int]:
    """draws, completions_sampled, groups_kept (passed the filter), groups_dropped_<type> (by
    group type: all_correct, all_wrong, mixed) and groups_filled (dropped groups the step
    trains on, after rollout.max_draws)."""
    group_size = draws[0].batch.rollouts.group_size
    metrics = {
        "draws": len(draws),
        "completions_sampled": sum(len(draw.batch.texts) for draw in draws),
        "groups_kept": sum(int(draw.keep.sum()) for draw in draws),
    }
    for kind in ("all_correct", "all_wrong", "mixed"):
        metrics[f"groups_dropped_{kind}"] = sum(
            int((group_types(draw.batch.scores.correct, group_size)[kind] & ~draw.keep).sum())
            for draw in draws
        )
    metrics["groups_filled"] = sum(1 for d, q in chosen if not draws[d].keep[q])
    return metrics


def warn_if_filled(metrics: dict[str, int], max_draws: int) -> None:
    """Where a step trains on dropped groups because rollout.max_draws ran out (draw_metrics'
    groups_filled), say so: this is groupwise's own rule (docs/algorithms.md, "Dynamic
    sampling"), not verl's. One text per run, so Python shows it once."""
    if metrics["groups_filled"]:
        warnings.warn(
            f"rollout.max_draws={max_draws} draws did not give a step its kept groups, so it "
            "trains on dropped ones in their place (groups_filled in metrics.jsonl; this "
            "warning is shown once). verl does otherwise: its v1 replay buffer keeps drawing (it "
            "ignores max_num_gen_batches) and its DAPO recipe's trainer stops with an error",
            stacklevel=2,
        )


def select_groups(groups: list[tuple[Rollouts, int]]) -> Rollouts:
    """One Rollouts of the groups (rollouts, prompt index) in that order; prompts stay left
    padded and completions right padded to the widest of them."""
    parts = [_group(rollouts, index) for rollouts, index in groups]
    prompt_width = max(p.prompt_ids.shape[1] for p in parts)
    width = max(p.completion_ids.shape[1] for p in parts)
    sampler = [p.sampler_logp for p in parts]
    return Rollouts(
        prompt_ids=torch.cat([_pad(p.prompt_ids, prompt_width, left=True) for p in parts]),
        prompt_mask=torch.cat([_pad(p.prompt_mask, prompt_width, left=True) for p in parts]),
        completion_ids=torch.cat([_pad(p.completion_ids, width) for p in parts]),
        completion_mask=torch.cat([_pad(p.completion_mask, width) for p in parts]),
        texts=[text for p in parts for text in p.texts],
        truncated=torch.cat([p.truncated for p in parts]),
        group_size=parts[0].group_size,
        sampler_logp=None
        if any(s is None for s in sampler)
        else torch.cat([_pad(s, width) for s in sampler]),
    )


def _group(rollouts: Rollouts, index: int) -> Rollouts:
    """The prompt `index` of rollouts and its group of completions."""
    n = rollouts.group_size
    rows = slice(index * n, index * n + n)
    return Rollouts(
        prompt_ids=rollouts.prompt_ids[index : index + 1],
        prompt_mask=rollouts.prompt_mask[index : index + 1],
        completion_ids=rollouts.completion_ids[rows],
        completion_mask=rollouts.completion_mask[rows],
        texts=rollouts.texts[rows],
        truncated=rollouts.truncated[rows],
        group_size=n,
        sampler_logp=None if rollouts.sampler_logp is None else rollouts.sampler_logp[rows],
    )


def _pad(values: torch.Tensor, width: int, left: bool = False) -> torch.Tensor:
    """values [N, w] padded with zeros to [N, width] (masks are 0 there)."""
    extra = width - values.shape[1]
    return F.pad(values, (extra, 0) if left else (0, extra))
