"""Group-relative advantages: GRPO (docs/algorithms.md §1) and LENS (§3).

Every function here takes a flat batch of B completions laid out group-major: rows
g*G .. g*G+G-1 are the G completions of question g, so B must be a multiple of G.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

SCALES = ("group", "batch", "none")
STDS = ("unbiased", "population")
LENS_MODES = ("full", "mixed_only", "negative_only")
LENS_DIFFICULTIES = ("pbar", "sequence")


def _as_groups(values: Tensor, group_size: int, name: str) -> Tensor:
    """View a flat group-major tensor [B] as [B // G, G], with clear errors on bad input."""
    if not isinstance(values, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(values).__name__}")
    if values.dim() != 1:
        raise ValueError(f"{name} must be 1-D [B], got shape {tuple(values.shape)}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if values.numel() == 0 or values.numel() % group_size != 0:
        raise ValueError(
            f"{name} has {values.numel()} rows, not a positive multiple of group_size="
            f"{group_size} (the batch must hold whole groups, group-major)"
        )
    return values.reshape(-1, group_size)


def _as_float(values: Tensor, name: str) -> Tensor:
    """Floating view of rewards; integer and bool rewards become the default float dtype."""
    if not isinstance(values, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(values).__name__}")
    if not values.is_floating_point():
        values = values.to(torch.get_default_dtype())
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return values


def _as_bool(correct: Tensor, name: str = "correct") -> Tensor:
    """Correctness flags as bool; accepts bool or 0/1 numbers, rejects anything else."""
    if not isinstance(correct, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(correct).__name__}")
    if correct.dtype == torch.bool:
        return correct
    if not bool(((correct == 0) | (correct == 1)).all()):
        raise ValueError(f"{name} must be bool or hold only 0/1 values")
    return correct != 0


def _check_choice(value: str, name: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(choices)}")


def group_advantages(
    rewards: Tensor,
    group_size: int,
    scale: str = "group",
    eps: float = 1e-4,
    std: str = "unbiased",
) -> Tensor:
    """GRPO group-normalised advantage, one scalar per completion (docs/algorithms.md §1).

    A_i = (r_i - mean_group r) / (std + eps), shared by every token of completion i.

    Args:
        rewards: [B] reward totals, group-major (any unit; the advantage is unitless).
        group_size: G, completions per question; B must be a multiple of G.
        scale: "group" divides by the std of the group (the papers), "batch" by the std of the
            whole batch (TRL's scale_rewards="batch"), "none" does not divide (Dr.GRPO).
        eps: added to the std, 1e-4 as TRL.
        std: "unbiased" (Bessel, n - 1: TRL's and verl's torch.std, the default) or
            "population" (n). At G = 8 population makes every advantage 1.069x larger.

    Returns:
        [B] advantages in the dtype of rewards (default float dtype for int/bool rewards).
        A group whose rewards are all equal gets 0.
    """
    _check_choice(scale, "scale", SCALES)
    _check_choice(std, "std", STDS)
    rewards = _as_float(rewards, "rewards")
    grouped = _as_groups(rewards, group_size, "rewards")
    if std == "unbiased" and scale == "group" and group_size < 2:
        raise ValueError('std="unbiased" needs group_size >= 2 (one completion has no spread)')
    unbiased = std == "unbiased"
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale == "group":
        centred = centred / (grouped.std(dim=1, unbiased=unbiased, keepdim=True) + eps)
    elif scale == "batch":
        centred = centred / (rewards.std(unbiased=unbiased) + eps)
    return centred.reshape(-1)


def group_types(correct: Tensor, group_size: int) -> dict[str, Tensor]:
    """Classify each group by its binary correctness (docs/algorithms.md §3).

    Args:
        correct: [B] bool (or 0/1) correctness, group-major.
        group_size: G.

    Returns:
        dict of bool tensors [B // G]: "all_correct" (every completion correct), "all_wrong"
        (a negative group: none correct) and "mixed" (some but not all correct). Exactly one
        is true per group.
    """
    grouped = _as_groups(_as_bool(correct), group_size, "correct")
    any_correct = grouped.any(dim=1)
    all_correct = grouped.all(dim=1)
    return {
        "all_correct": all_correct,
        "all_wrong": ~any_correct,
        "mixed": any_correct & ~all_correct,
    }


def lens_rewards(
    correct: Tensor,
    mean_logp: Tensor,
    group_size: int,
    difficulty: str = "pbar",
    lengths: Tensor | None = None,
) -> Tensor:
    """LENS calibrated rewards rt (docs/algorithms.md §3, paper Eq. 10 and 14).

    With r_i in {0, 1} and the confidence pbar_i = exp(mean_logp_i) (detached):

        D_imp = [ (1/G) sum_i r_i / p_i ]^(-1)             mixed groups
        D     = max(D_imp, 2 max_j pbar_j)                 mixed group
        D     = 2 max_j pbar_j                             negative group
        rt_i  = r_i - (1 - r_i) (1/G) pbar_i / (D - pbar_i)

    p_i inside D_imp is pbar_i with difficulty="pbar" (the default: the paper's paragraph
    before Eq. 14 replaces pi_old by its length-normalised pbar), or the raw sequence
    probability pi_old(o_i | q) = exp(mean_logp_i * |o_i|) with difficulty="sequence" (Eq. 14 as
    typeset; D_imp then almost always falls below the floor, so D = 2 max pbar). Both are
    computed in log space, so neither overflows however long the completion.

    Correct completions keep rt = 1 (so an all-correct group is all ones); wrong ones get rt in
    [-1/G, 0), more negative the more confident the model was. Since D >= 2 pbar_i, the penalty
    pbar_i / (D - pbar_i) lies in (0, 1]; it is computed relative to the group's top confidence,
    as u / (1 - u) with u = pbar_i / D in (0, 1/2], so that tiny confidences (very negative
    mean_logp) give neither 0/0 nor overflow. (A mistake exp(-87) times less confident than its
    group's top one, float32's range, gets a penalty that rounds to 0.)

    Args:
        correct: [B] bool (or 0/1) binary correctness, group-major.
        mean_logp: [B] per-completion mean token log-probability under the rollout policy
            (nats per token, see sequence_mean_logp); must be finite. Detached here.
        group_size: G.
        difficulty: "pbar" | "sequence", the p_i of D_imp (above).
        lengths: [B] completion lengths |o_i| in tokens; needed by difficulty="sequence" only.

    Returns:
        [B] calibrated rewards rt, dtype of mean_logp (default float dtype if not floating).
    """
    _check_choice(difficulty, "difficulty", LENS_DIFFICULTIES)
    correct = _as_bool(correct)
    is_right = _as_groups(correct, group_size, "correct")
    logp = _as_groups(_as_float(mean_logp, "mean_logp").detach(), group_size, "mean_logp")
    if logp.shape != is_right.shape:
        raise ValueError(
            f"mean_logp has shape {tuple(mean_logp.shape)}, correct {tuple(correct.shape)}: "
            "they must match"
        )
    # Work relative to the group's top confidence, so that the top completion's u is exactly
    # 1/2 even when |mean_logp| is large (float32 loses digits in logp - log D otherwise).
    top = logp.max(dim=1, keepdim=True).values
    relative = logp - top
    if difficulty == "sequence":
        if lengths is None:
            raise ValueError('difficulty="sequence" needs the completion lengths')
        size = _as_groups(_as_float(lengths, "lengths"), group_size, "lengths").to(logp.dtype)
        if size.shape != logp.shape:
            raise ValueError(
                f"lengths has shape {tuple(lengths.shape)}, mean_logp {tuple(mean_logp.shape)}: "
                "they must match"
            )
        log_p = logp * size - top  # log(pi_old(o_i | q) / max pbar)
    else:
        log_p = relative  # log(pbar_i / max pbar)
    # log(D_imp / max pbar) = log G - log sum_{correct} exp(-log_p), in groups with a correct
    # completion only (D_imp would be +inf in a negative group, whose D is 2 max pbar alone).
    minus_inf = torch.full_like(relative, -math.inf)
    log_d_imp = math.log(group_size) - torch.logsumexp(
        torch.where(is_right, -log_p, minus_inf), dim=1, keepdim=True
    )
    has_correct = is_right.any(dim=1, keepdim=True)
    log_two = math.log(2.0)
    # log(D / max pbar) = max(log 2, log(D_imp / max pbar))
    log_d = torch.where(
        has_correct, log_d_imp.clamp(min=log_two), torch.full_like(log_d_imp, log_two)
    )
    u = torch.exp(relative - log_d)
    penalty = u / (1.0 - u)
    calibrated = torch.where(is_right, torch.ones_like(logp), -penalty / group_size)
    return calibrated.reshape(-1)


def lens_calibrated_total(
    total: Tensor,
    correctness: Tensor,
    correct: Tensor,
    calibrated: Tensor,
    correct_reward: float,
) -> Tensor:
    """A weighted reward sum with LENS's calibrated correctness in place of the plain one.

    docs/algorithms.md §3, "AMIR-GRPO + LENS together" (ours): for a wrong completion the
    correctness component's contribution to the total is replaced by correct_reward * rt_i (a
    penalty in [-correct_reward / G, 0)); a correct completion keeps its total (rt = 1 there). With
    the binary reward alone (total = correctness = r, correct_reward = 1) this is rt itself.

    Args:
        total: [B] weighted reward sums.
        correctness: [B] the correctness component's weighted contribution to total
            (weight x its value; usually 0 for a wrong answer).
        correct: [B] bool (or 0/1) binary correctness.
        calibrated: [B] rt from lens_rewards.
        correct_reward: what the correctness component contributes for a correct answer
            (weight x its correct value, e.g. 1.0 x 2.0 for AMIR's correctness).

    Returns:
        [B] totals, dtype of total (default float dtype if not floating).
    """
    total = _as_float(total, "total")
    correct = _as_bool(correct)
    replaced = total - correctness.to(total.dtype) + correct_reward * calibrated.to(total.dtype)
    return torch.where(correct, total, replaced)


def lens_advantages_from_rewards(
    calibrated: Tensor,
    plain: Tensor | None,
    correct: Tensor,
    group_size: int,
    alpha: float = 0.25,
    mode: str = "full",
    eps: float = 1e-4,
    std: str = "unbiased",
) -> Tensor:
    """LENS advantage rules applied to arbitrary reward totals (docs/algorithms.md §3).

    The group type comes from the binary `correct`:
    - mixed group: GRPO normalisation (mean, group std + eps) of `calibrated`, or of
      `plain` in mode "negative_only" (the plain binary GRPO of paper App. D.2);
    - negative group (none correct): alpha * (calibrated_i - mean_group calibrated), or 0 in
      mode "mixed_only";
    - all-correct group: 0.

    This is the combination rule of "AMIR-GRPO + LENS together" (ours): `calibrated` is the
    weighted reward sum with the calibrated correctness in place of plain correctness, and
    `plain` the same sum with plain correctness. lens_advantages calls this with rt and r.

    Args:
        calibrated: [B] reward totals that contain the LENS calibrated correctness.
        plain: [B] reward totals without calibration; only read in mode "negative_only"
            (may be None otherwise).
        correct: [B] bool (or 0/1) binary correctness, group-major.
        group_size: G.
        alpha: weight of negative-group advantages (paper default 0.25), >= 0.
        mode: "full" | "mixed_only" | "negative_only" (paper App. D.2 ablations).
        eps: added to the group std in mixed groups.
        std: "unbiased" | "population", the group std of mixed groups (group_advantages).

    Returns:
        [B] advantages, dtype of `calibrated`.
    """
    _check_choice(mode, "mode", LENS_MODES)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not alpha >= 0:
        raise ValueError(f"alpha must be a number >= 0, got {alpha!r}")
    calibrated = _as_float(calibrated, "calibrated")
    types = group_types(correct, group_size)
    grouped = _as_groups(calibrated, group_size, "calibrated")
    if correct.shape != calibrated.shape:
        raise ValueError(
            f"correct has shape {tuple(correct.shape)}, calibrated {tuple(calibrated.shape)}: "
            "they must match"
        )
    if mode == "negative_only":
        if plain is None:
            raise ValueError('mode="negative_only" needs the plain (uncalibrated) rewards')
        plain = _as_float(plain, "plain").to(calibrated.dtype)
        if plain.shape != calibrated.shape:
            raise ValueError(
                f"plain has shape {tuple(plain.shape)}, calibrated "
                f"{tuple(calibrated.shape)}: they must match"
            )
        mixed_values = plain
    else:
        mixed_values = calibrated
    mixed_adv = group_advantages(mixed_values, group_size, scale="group", eps=eps, std=std)
    mixed_adv = mixed_adv.view(-1, group_size)
    negative_adv = alpha * (grouped - grouped.mean(dim=1, keepdim=True))
    use_negative = types["all_wrong"] & (mode != "mixed_only")
    zeros = torch.zeros_like(grouped)
    advantages = torch.where(
        types["mixed"].unsqueeze(1),
        mixed_adv,
        torch.where(use_negative.unsqueeze(1), negative_adv, zeros),
    )
    return advantages.reshape(-1)


def lens_advantages(
    correct: Tensor,
    mean_logp: Tensor,
    group_size: int,
    alpha: float = 0.25,
    mode: str = "full",
    eps: float = 1e-4,
    std: str = "unbiased",
    difficulty: str = "pbar",
    lengths: Tensor | None = None,
) -> Tensor:
    """LENS advantages from binary correctness and rollout confidence (docs/algorithms.md §3).

    rt = lens_rewards(correct, mean_logp, G), then the rules of lens_advantages_from_rewards
    with calibrated = rt and plain = r (binary): mixed groups GRPO-normalise rt (or r in
    "negative_only"), negative groups get alpha * (rt - mean rt) (0 in "mixed_only"),
    all-correct groups 0. In "full" mode the sign of every mixed-group advantage equals the
    sign of plain GRPO's, and every negative-group advantage is below alpha/G in magnitude.

    Args:
        correct: [B] bool (or 0/1), group-major.
        mean_logp: [B] mean token log-prob of each completion under the rollout policy.
        group_size: G.
        alpha, mode, eps, std: as lens_advantages_from_rewards.
        difficulty, lengths: as lens_rewards.

    Returns:
        [B] advantages, dtype of mean_logp.
    """
    calibrated = lens_rewards(correct, mean_logp, group_size, difficulty, lengths)
    plain = _as_bool(correct).to(calibrated.dtype)
    return lens_advantages_from_rewards(
        calibrated, plain, correct, group_size, alpha=alpha, mode=mode, eps=eps, std=std
    )
