"""What a training step logs: its metrics.jsonl line and its rollouts.jsonl line
(docs/guides/train.md, "A run folder", lists the keys)."""

from __future__ import annotations

from typing import Any

import torch

from groupwise.algorithms import GroupTargets, LossTerms, group_types
from groupwise.rewards import Scores
from groupwise.rewards.checking import UNPARSED
from groupwise.train.batch import Learned, ScoredBatch
from groupwise.train.progress import all_wrong_with_gradient

PER_UPDATE = (
    "policy_loss",
    "kl",
    "clip_fraction_low",
    "clip_fraction_high",
    "clip_fraction",
    "ratio_mean",
    "grad_norm",
)
"""Update metrics averaged over the step's updates (mini-batches x epochs)."""

ENTROPY_METRICS = ("entropy", "entropy_coef")
"""Averaged over the step's updates where an entropy option computed them (docs/algorithms.md,
"Entropy controls"): the mean token entropy (nats) and the entropy bonus's coefficient."""


def micro_batch_metrics(
    terms: LossTerms, targets: GroupTargets, share: float, token_share: float
) -> dict[str, float]:
    """A micro-batch's part of its update's metrics: losses by their share of the update, clip
    statistics by its share of the tokens, sums over its AMIR pairs as they are."""
    pairs = targets.pair_losses is not None
    return {
        "policy_loss": share * float(terms.policy.detach()),
        "kl": share * float(terms.kl.detach()) if terms.kl is not None else 0.0,
        **{name: float(value) * token_share for name, value in terms.clip.items()},
        "preference_loss_sum": float(targets.pair_losses.sum()) if pairs else 0.0,
        "pair_logp_margin_sum": float(targets.logp_margins.sum()) if pairs else 0.0,
    }


def step_metrics(
    step: int,
    epoch: int,
    num_questions: int,
    batch: ScoredBatch,
    learned: Learned,
    tokens: int,
    seconds: tuple[float, float, float, float],
) -> dict[str, Any]:
    """The metrics.jsonl line of a step (1-based `step`). tokens: the whole batch's completion
    tokens; seconds: (start, generated, scored, trained) clock readings."""
    group_size = batch.rollouts.group_size
    updates, targets = learned.updates, learned.targets
    t_start, t_generated, t_scored, t_trained = seconds
    pairs = sum(u["pairs"] for u in updates)
    return {
        "step": step,
        "epoch": epoch,
        **reward_metrics(batch.scores, group_size),
        **{key: _mean(updates, key) for key in PER_UPDATE},
        **{key: _mean(updates, key) for key in ENTROPY_METRICS if key in updates[0]},
        "updates": len(updates),
        "preference_loss": _total(updates, "preference_loss_sum") / pairs if pairs else 0.0,
        "pair_logp_margin": _total(updates, "pair_logp_margin_sum") / pairs if pairs else 0.0,
        "pairs": targets.num_pairs,
        "pairs_per_group": targets.num_pairs / num_questions,
        **({"lambda": updates[-1]["lambda"]} if "lambda" in updates[-1] else {}),
        "group_all_wrong_active": all_wrong_with_gradient(
            batch.scores.correct, targets.advantages, group_size
        ),
        **(all_wrong_metrics(learned) if "all_wrong_grad_norm" in updates[0] else {}),
        "advantage_abs_mean": float(targets.advantages.abs().mean()),
        "reward_used_mean": float(targets.rewards.mean()),
        "learning_rate": updates[-1]["learning_rate"],
        "completion_length_mean": tokens / len(batch.texts),
        "truncated_fraction": float(batch.truncated.float().mean()),
        "completion_tokens": tokens,
        **learned.sampler,
        "seconds_generation": t_generated - t_start,
        "seconds_scoring": t_scored - t_generated,
        "seconds_training": t_trained - t_scored,
        # the no-grad rollout-policy pass inside seconds_training (0 where the first update's
        # own pass gives logp_old: train.step_targets)
        "seconds_old_policy": learned.seconds_old_policy,
        "seconds_step": t_trained - t_start,
        "tokens_per_second": tokens / max(t_trained - t_start, 1e-9),
    }


def step_samples(
    step: int, problems: list[Any], batch: ScoredBatch, learned: Learned
) -> dict[str, Any]:
    """The rollouts.jsonl line of a step: completions, reward columns, advantages, pairs; for
    `groupwise view` also the questions, cut flags, rewards before LENS shaped them and the
    sampler's mean log-probs (null where unknown)."""
    group_size = batch.rollouts.group_size
    targets = learned.targets
    unshaped = targets.unshaped_rewards
    return {
        "step": step,
        "problem_ids": [p.id for p in problems],
        "questions": [p.question for p in problems],
        "truncated": batch.truncated.tolist(),
        "unshaped_rewards": None if unshaped is None else unshaped.tolist(),
        "sampler_mean_logp": sampler_mean_logp(batch),
        "completions": batch.texts,
        "golds": [p.answer for p in problems for _ in range(group_size)],
        "correct": batch.scores.correct.tolist(),
        "reward_columns": {k: v.tolist() for k, v in batch.scores.columns.items()},
        "rewards": targets.rewards.tolist(),
        "advantages": targets.advantages.tolist(),
        "pairs": [targets.chosen.tolist(), targets.rejected.tolist()],
    }


def sampler_mean_logp(batch: ScoredBatch) -> list[float] | None:
    """[B] the sampler's mean token log-prob of each completion, where the engine gave its
    log-probs and this process holds the whole batch; None otherwise."""
    rollouts = batch.rollouts
    if rollouts.sampler_logp is None or len(rollouts) != len(batch.texts):
        return None
    mask = rollouts.completion_mask.to(rollouts.sampler_logp.dtype)
    sums = (rollouts.sampler_logp * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    return sums[torch.argsort(batch.rows)].tolist()


def reward_metrics(scores: Scores, group_size: int) -> dict[str, float]:
    """Reward means, accuracy, group types (docs/algorithms.md §3) and answer-check statuses."""
    kinds = group_types(scores.correct, group_size)
    metrics = {
        "reward_mean": float(scores.total.float().mean()),
        "reward_std": float(scores.total.float().std(unbiased=False)),
        "accuracy": float(scores.correct.float().mean()),
        "group_all_correct": float(kinds["all_correct"].float().mean()),
        "group_all_wrong": float(kinds["all_wrong"].float().mean()),
        "group_mixed": float(kinds["mixed"].float().mean()),
    }
    for name, column in scores.columns.items():
        metrics[f"reward_{name}_mean"] = float(column.float().mean())
    for status in ("timeout", "no_answer", "error"):
        metrics[f"answers_{status}"] = sum(v.status == status for v in scores.verdicts)
    # compared as text because math-verify could not parse one side: a count, not a warning
    metrics["answers_unparsed"] = sum(v.detail.startswith(UNPARSED) for v in scores.verdicts)
    return metrics


def all_wrong_metrics(learned: Learned) -> dict[str, float]:
    """train.log_all_wrong_gradient's step metrics: the updates' mean all-wrong gradient norm
    and share."""
    return {
        "all_wrong_grad_norm": _mean(learned.updates, "all_wrong_grad_norm"),
        "all_wrong_grad_share": _mean(learned.updates, "all_wrong_grad_share"),
    }


def _mean(updates: list[dict[str, float]], key: str) -> float:
    return sum(u[key] for u in updates) / len(updates)


def _total(updates: list[dict[str, float]], key: str) -> float:
    return sum(u[key] for u in updates)
