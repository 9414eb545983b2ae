"""Which groups dynamic sampling keeps (docs/algorithms.md, "Dynamic sampling").

DAPO (arXiv 2503.14476, section 3.2) drops every group whose rewards are all equal:
its GRPO advantages are all zero, so it adds no gradient but dilutes the batch. The engine then
draws more questions until the step has its groups (verl's `algorithm.filter_groups`); drawing
is the engine's, the decision is this pure function.

The metric the decision reads:

- "correct": the binary correctness (verl's `metric: acc`): all-correct and all-wrong groups
  are dropped.
- "reward": the weighted reward total (verl's `metric: score`): a group whose answers are all
  wrong but whose format rewards differ is kept.
- "shaped": the LENS-shaped reward totals (docs/algorithms.md §3). They are constant exactly where
  LENS gives the group zero advantages by its rules: all-correct groups, and all-wrong ones in
  lens_mode "mixed_only". A mixed group's calibrated rewards always differ (1 against
  negatives), and an all-wrong group's differ with its confidences. The rule is read from the
  group types, before the rollout policy's confidences exist; an all-wrong group whose
  confidences are exactly equal is kept (its LENS advantages are then 0).
"""

from __future__ import annotations

from torch import Tensor

from groupwise.algorithms.advantages import (
    LENS_MODES,
    _as_float,
    _as_groups,
    _check_choice,
    group_types,
)

FILTER_METRICS = ("correct", "reward", "shaped")


def constant_groups(values: Tensor, group_size: int) -> Tensor:
    """[B // G] bool: True where the group's `values` ([B], group-major) are all equal."""
    grouped = _as_groups(_as_float(values, "values"), group_size, "values")
    return (grouped == grouped[:, :1]).all(dim=1)


def kept_groups(
    correct: Tensor,
    rewards: Tensor,
    group_size: int,
    metric: str = "correct",
    lens_mode: str = "full",
) -> Tensor:
    """The groups dynamic sampling keeps: [B // G] bool, False where the metric is constant.

    Args:
        correct: [B] bool (or 0/1) binary correctness, group-major.
        rewards: [B] weighted reward totals (read by metric "reward").
        group_size: G.
        metric: "correct" | "reward" | "shaped" (module docstring).
        lens_mode: LENS's ablation mode, read by metric "shaped" (docs/algorithms.md §3).
    """
    _check_choice(metric, "metric", FILTER_METRICS)
    _check_choice(lens_mode, "lens_mode", LENS_MODES)
    if rewards.shape != correct.shape:
        raise ValueError(
            f"rewards has shape {tuple(rewards.shape)}, correct {tuple(correct.shape)}: "
            "they must match"
        )
    types = group_types(correct, group_size)
    if metric == "reward":
        return ~constant_groups(rewards, group_size)
    if metric == "correct":
        return types["mixed"]
    if lens_mode == "mixed_only":
        return types["mixed"]
    return ~types["all_correct"]
