"""What a verl trainer's `_compute_advantage` writes for groupwise, and the driver's lambda update
(docs/guides/verl.md, "The batch fields").

verl's `PPOTrainer._compute_advantage` already fetches each row's uid, response mask, scores and
old (or rollout) log-probs; `batch_fields` turns them into what groupwise's actor loss reads:
the advantages, AMIR's per-row weights (`loss.COEFFICIENTS`, lambda folded in) and groupwise's
metrics under verl-style names, all through the one Algorithm (advantages.targets_for_rows).
`observe_losses` is AMIR's official lambda rule (docs/algorithms.md §2) on the driver, from the
policy loss verl logs (`actor/pg_loss`) and the batch's L_pref.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from groupwise.algorithms.advantages import group_types
from groupwise.integrations.verl.advantages import targets_for_rows
from groupwise.integrations.verl.loss import amir_row_weights
from groupwise.integrations.verl.options import VerlAlgorithm


@dataclass(frozen=True)
class BatchFields:
    """advantages: [B, T] in verl's row order, on response tokens. weights: [B] AMIR's w_k
    (the batch field loss.COEFFICIENTS), None without AMIR. metrics: name -> value for verl's
    metrics dict. pref_loss: the batch's L_pref at the rollout policy (nats), None without pairs.
    """

    advantages: Tensor
    weights: Tensor | None
    metrics: dict[str, float]
    pref_loss: float | None


def batch_fields(
    built: VerlAlgorithm,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Any,
    old_log_probs: Tensor | None = None,
    correct: Tensor | None = None,
    truncated: Tensor | None = None,
) -> BatchFields:
    """groupwise's fields of one verl training batch (module docstring), through the run's
    algorithm `built`: token_level_rewards and response_mask [B, T], index [B] uid (groups of
    built.group_size), old_log_probs [B, T] (needed by AMIR and LENS), correct [B] bool (the
    reward's own correctness; else the score's), truncated [B] bool (responses cut at the length
    limit, which form no AMIR pair: the caller masks them out of the loss)."""
    targets, order = targets_for_rows(
        built, token_level_rewards, response_mask, index, old_log_probs, None, correct, truncated
    )
    algorithm, group_size = built.algorithm, built.group_size
    rows = order.numel()
    advantages = torch.empty_like(targets.advantages)
    advantages[order] = targets.advantages
    per_token = advantages.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    metrics: dict[str, float] = {}
    scores = token_level_rewards.sum(dim=-1)[order]
    value = built.verl.correctness_value
    is_correct = scores == value if correct is None else correct[order].bool()
    if correct is not None or bool((is_correct | (scores == 0)).all()):
        kinds = group_types(is_correct, group_size)
        for kind, flags in kinds.items():
            metrics[f"groupwise/groups/{kind}"] = float(flags.float().mean())
        all_wrong = kinds["all_wrong"]
        moved = targets.advantages.reshape(-1, group_size).ne(0).any(dim=1) & all_wrong
        metrics["groupwise/groups/all_wrong_with_gradient"] = float(moved.float().mean())
    if truncated is not None:
        metrics["groupwise/truncated"] = float(truncated.float().mean())
    weights, pref_loss = None, None
    if algorithm.pair_settings is not None:
        weights = torch.empty(rows)
        weights[order] = amir_row_weights(targets.coefficients, algorithm.lambda_reg.value)
        pairs = targets.num_pairs
        pref_loss = float(targets.pair_losses.mean()) if pairs else None
        metrics["groupwise/amir/pairs"] = float(pairs)
        metrics["groupwise/amir/lambda"] = algorithm.lambda_reg.value
        metrics["groupwise/amir/preference_loss"] = pref_loss or 0.0
        algorithm.pairless.observe(targets, group_size)
    return BatchFields(per_token, weights, metrics, pref_loss)


def observe_losses(built: VerlAlgorithm, pg_loss: float, pref_loss: float | None) -> float:
    """AMIR's lambda rule once per training batch (docs/algorithms.md §2: only where there were
    pairs), from verl's logged policy loss, on the run's algorithm `built` (the one
    `batch_fields` used); returns the new lambda."""
    lambda_reg = built.algorithm.lambda_reg
    if lambda_reg is None:
        raise ValueError("observe_losses needs AMIR (algorithm.groupwise.amir=true)")
    if pref_loss is not None:
        lambda_reg.observe_losses(pg_loss, pref_loss)
    return lambda_reg.value
