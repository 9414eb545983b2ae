"""groupwise's advantage estimators as verl's (docs/guides/verl.md, "Advantage estimators").

Every estimator registered in groupwise (groupwise.algorithms.ADVANTAGE_ESTIMATORS: grpo, lens,
and any registered with register_advantage_estimator before the plugin loads, or passed to
`register_estimators` after) is registered with verl's `register_adv_est` as `groupwise_NAME`.
Each one regroups verl's rows (any order: verl's `balance_batch` reorders them) by their uid into
whole groups, and computes the advantages through the one `Algorithm` that
`AlgorithmOptions.build` makes (docs/algorithms.md §1-3), never a copy of the math:

    verl rows (uid, token_level_rewards) -> group-major GroupRewards -> Algorithm.targets
        -> advantages back in verl's row order, on every response token

verl's `compute_advantage` passes only the token-level rewards, the response mask, the uid and
its `algorithm` config. An estimator that needs the rollout policy's l(q, o) (LENS) gets it from
`old_log_probs` (or `rollout_log_probs`), [B, T] per-token log-probs, where a caller passes them;
without them it refuses in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from groupwise.algorithms import ADVANTAGE_ESTIMATORS, Algorithm, GroupRewards, GroupTargets
from groupwise.algorithms.logprobs import sequence_mean_logp
from groupwise.integrations.verl.options import (
    ESTIMATOR_PREFIX,
    VerlAlgorithm,
    build_algorithm,
    verl_name,
)

VerlEstimator = Callable[..., tuple[Tensor, Tensor]]


def group_order(index: Any) -> tuple[Tensor, int]:
    """Rows in group-major order from verl's uid per row ([B], any hashable values, groups in
    order of first appearance, rows in their order within a group), and G. Every group must have
    the same number of rows, at least 2 (one answer has no group baseline)."""
    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(np.asarray(index, dtype=object).tolist()):
        groups.setdefault(uid, []).append(row)
    sizes = {len(rows) for rows in groups.values()}
    if len(sizes) != 1:
        raise ValueError(
            f"groupwise's estimators need every uid to have the same number of responses "
            f"(actor_rollout_ref.rollout.n); got group sizes {sorted(sizes)}"
        )
    (size,) = sizes
    if size < 2:
        raise ValueError(
            "groupwise's estimators need actor_rollout_ref.rollout.n >= 2 responses per prompt"
        )
    order = torch.tensor([row for rows in groups.values() for row in rows], dtype=torch.long)
    return order, size


def group_rewards(
    scores: Tensor,
    order: Tensor,
    group_size: int,
    algorithm: Algorithm,
    correctness_value: float,
    mean_logp_old: Tensor | None = None,
    lengths: Tensor | None = None,
    option: str = verl_name("correctness_value"),
    correct: Tensor | None = None,
) -> GroupRewards:
    """The group-major GroupRewards of verl's scores [B] (float, verl's row order): the score is
    the reward total. The correctness is `correct` ([B] bool, verl's row order: the reward's
    own correctness key) where given; else the score itself must be 0 or `correctness_value`
    (verl's math rewards) where the estimator needs correctness, or a one-line error names
    `option`."""
    rewards = scores[order].float()
    if correct is not None:
        correct = correct[order].bool()
    else:
        correct = rewards == correctness_value
        if algorithm.needs_correctness and not bool((correct | (rewards == 0)).all()):
            seen = sorted({float(v) for v in rewards.unique()[:6]})
            raise ValueError(
                f"advantage estimator '{algorithm.estimator.name}' needs a binary correctness "
                f"score (0 or {option}={correctness_value:g}, or {verl_name('correctness_key')} "
                f"naming the reward's correctness); verl's scores include {seen}"
            )
    return GroupRewards(
        rewards,
        correct,
        group_size,
        correct_reward=correctness_value,
        mean_logp_old=None if mean_logp_old is None else mean_logp_old[order].float(),
        lengths=None if lengths is None else lengths[order].float(),
    )


_BUILT: dict[tuple[str, str], VerlAlgorithm] = {}


def algorithm_for(config: Any, estimator: str, group_size: int) -> VerlAlgorithm:
    """build_algorithm once per configuration in this process, for verl's own trainers, whose
    estimator call sees only verl's `algorithm` config and the uids (the Algorithm holds
    AdaptiveLambda's state); a later batch whose groups have another size is an error
    (VerlAlgorithm.check_group_size), never a fresh Algorithm. groupwise's trainer mode builds
    its own, once, from actor_rollout_ref.rollout.n."""
    key = (repr(config), estimator)  # verl's configs are not hashable
    if key not in _BUILT:
        _BUILT[key] = build_algorithm(config, estimator, group_size)
    _BUILT[key].check_group_size(group_size)
    return _BUILT[key]


def targets_for_rows(
    built: VerlAlgorithm,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Any,
    old_log_probs: Tensor | None = None,
    rollout_log_probs: Tensor | None = None,
    correct: Tensor | None = None,
    unpaired: Tensor | None = None,
) -> tuple[GroupTargets, Tensor]:
    """groupwise's targets (group-major) of verl's rows and the group-major order of those rows,
    through `built`'s Algorithm: see the module docstring. index: [B] uid, in groups of
    built.group_size. old_log_probs / rollout_log_probs: [B, T] per-token log-probs of the
    responses (nats), the first one given is used. correct: [B] bool, the reward's own
    correctness (else read from the score, `group_rewards`). unpaired: [B] bool, rows that form
    no AMIR pair (masked out of the loss: mask_truncated)."""
    order, size = group_order(index)
    built.check_group_size(size)
    algorithm, estimator = built.algorithm, built.estimator
    mask = response_mask.bool()
    token_logps = old_log_probs if old_log_probs is not None else rollout_log_probs
    mean_logp = None
    if token_logps is not None:
        mean_logp = sequence_mean_logp(token_logps.detach().float(), mask)
    elif algorithm.needs_rollout_logp:
        raise ValueError(needs_log_probs(estimator))
    batch = group_rewards(
        token_level_rewards.sum(dim=-1),
        order,
        size,
        algorithm,
        built.verl.correctness_value,
        mean_logp_old=mean_logp,
        lengths=mask.sum(dim=-1),
        correct=correct,
    )
    targets = algorithm.targets(
        batch,
        coefficients=mean_logp is not None,
        unpaired=None if unpaired is None else unpaired[order],
    )
    return targets, order


def needs_log_probs(estimator: str) -> str:
    """Why verl's own trainers cannot run groupwise estimator `estimator` with its options."""
    return (
        f"algorithm.adv_estimator={ESTIMATOR_PREFIX}{estimator} needs the rollout policy's "
        "log-probs (LENS's confidences, AMIR's coefficients), which verl 0.9.1's "
        "compute_advantage does not pass to an estimator (verl#7473): use "
        "trainer.v1.trainer_mode=groupwise, whose _compute_advantage passes them (verl's own sync "
        "and asynchronous trainers run the estimators that need none, as groupwise_grpo)"
    )


def masks_nothing(estimator: str) -> str:
    """Why verl's own trainers cannot run mask_truncated."""
    return (
        f"{verl_name('mask_truncated')}=true needs trainer.v1.trainer_mode=groupwise: verl's own "
        f"trainers give algorithm.adv_estimator={ESTIMATOR_PREFIX}{estimator} no way to take "
        "responses out of the loss"
    )


def check_verl_trainer(config: Any) -> None:
    """Before one of verl's own trainers starts a worker (its __init__; the trainer mode
    `groupwise` checks its own): a groupwise estimator's options are checked (AlgorithmOptions.
    build at G = rollout.n, one line naming the key), and what verl's trainers cannot run is
    refused in one line: an estimator or AMIR that needs the rollout policy's log-probs, and
    mask_truncated. verl's full config; other estimators pass."""
    estimator = str(config.algorithm.adv_estimator)
    name = estimator.removeprefix(ESTIMATOR_PREFIX)
    if not estimator.startswith(ESTIMATOR_PREFIX) or name not in ADVANTAGE_ESTIMATORS:
        return
    built = build_algorithm(config.algorithm, name, int(config.actor_rollout_ref.rollout.n))
    if built.algorithm.needs_rollout_logp:
        raise ValueError(needs_log_probs(name))
    if built.verl.mask_truncated:
        raise ValueError(masks_nothing(name))


def verl_estimator(name: str) -> VerlEstimator:
    """verl's estimator function for groupwise estimator `name` (register_adv_est's signature:
    token_level_rewards [B, T], response_mask [B, T], index [B] uid, config; returns the
    advantages and returns, [B, T], each response's advantage on its response tokens)."""

    def estimate(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: Any = None,
        config: Any = None,
        old_log_probs: Tensor | None = None,
        rollout_log_probs: Tensor | None = None,
        **unused: Any,
    ) -> tuple[Tensor, Tensor]:
        if index is None:
            raise ValueError(
                f"algorithm.adv_estimator={ESTIMATOR_PREFIX}{name} needs verl's uid per response"
            )
        built = algorithm_for(config, name, group_order(index)[1])
        if built.verl.mask_truncated:
            raise ValueError(masks_nothing(name))
        targets, order = targets_for_rows(
            built, token_level_rewards, response_mask, index, old_log_probs, rollout_log_probs
        )
        advantages = torch.empty_like(targets.advantages)
        advantages[order] = targets.advantages
        per_token = advantages.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
        return per_token, per_token

    estimate.__name__ = f"{ESTIMATOR_PREFIX}{name}"
    estimate.__doc__ = f"groupwise's '{name}' advantage estimator (docs/guides/verl.md)."
    return estimate


def register_estimators(register: Callable[[str], Callable[[VerlEstimator], Any]]) -> list[str]:
    """Register every groupwise estimator not registered yet with verl's `register_adv_est`
    (passed in: `register`), as groupwise_NAME; returns the names registered."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    names = []
    for name in sorted(ADVANTAGE_ESTIMATORS):
        verl_key = f"{ESTIMATOR_PREFIX}{name}"
        if verl_key not in ADV_ESTIMATOR_REGISTRY:
            register(verl_key)(verl_estimator(name))
            names.append(verl_key)
    return names
