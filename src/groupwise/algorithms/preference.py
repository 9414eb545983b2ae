"""AMIR-GRPO implicit preferences: pair mining, DPO-style loss, adaptive lambda_reg.

REFERENCE.md section 2. Batches are group-major as in advantages.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from groupwise.algorithms.advantages import _as_float, _as_groups, _check_choice

PAIR_MODES = ("all", "topk")


def _check_number(value: object, name: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if not positive and not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return float(value)


def mine_pairs(
    rewards: Tensor,
    group_size: int,
    margin: float,
    mode: str = "all",
    max_pairs_per_group: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Implicit preference pairs S(q) = {(i, j): r_i - r_j > margin} per group.

    REFERENCE.md section 2 (official code): the inequality is strict and compares the float
    rewards as given (no rounding), so pairs sit exactly on the margin are excluded.

    Args:
        rewards: [B] reward totals, group-major.
        group_size: G.
        margin: delta_r >= 0, in reward units.
        mode: "all" keeps every ordered pair of S(q); "topk" keeps only pairs whose preferred
            side is the group's top-reward completion. With ties for the top reward the
            first of them in the batch (lowest index, torch.argmax's rule, as the official
            code) is the top completion; the other tied ones are not preferred sides.
        max_pairs_per_group: None (no cap) or K >= 1: keep, per group, the K pairs with the
            largest reward gap r_i - r_j; among equal gaps the pair earlier in (i, j) order
            wins (a stable sort).

    Returns:
        (chosen, rejected): LongTensors [P] of global row indices into the batch; pair p says
        completion chosen[p] is preferred to rejected[p]. Ordered by group, then i, then j.
    """
    _check_choice(mode, "mode", PAIR_MODES)
    margin = _check_number(margin, "margin", positive=False)
    if max_pairs_per_group is not None and (
        isinstance(max_pairs_per_group, bool)
        or not isinstance(max_pairs_per_group, int)
        or max_pairs_per_group < 1
    ):
        raise ValueError(
            f"max_pairs_per_group must be None or an int >= 1, got {max_pairs_per_group!r}"
        )
    grouped = _as_groups(_as_float(rewards, "rewards"), group_size, "rewards")
    num_groups = grouped.shape[0]
    # gap[g, i, j] = r_i - r_j within group g
    gap = grouped.unsqueeze(2) - grouped.unsqueeze(1)
    keep = gap > margin
    if mode == "topk":
        top = grouped.argmax(dim=1)
        is_top = torch.arange(group_size, device=grouped.device) == top.unsqueeze(1)
        keep &= is_top.unsqueeze(2)
    if max_pairs_per_group is not None and max_pairs_per_group < group_size * group_size:
        flat_gap = torch.where(keep, gap, torch.full_like(gap, -math.inf))
        flat_gap = flat_gap.view(num_groups, -1)
        best = torch.sort(flat_gap, dim=1, descending=True, stable=True).indices
        capped = torch.zeros_like(flat_gap, dtype=torch.bool)
        capped.scatter_(1, best[:, :max_pairs_per_group], True)
        keep &= capped.view_as(keep)
    group, i, j = keep.nonzero(as_tuple=True)
    return group * group_size + i, group * group_size + j


def preference_loss(
    policy_mean_logp: Tensor,
    ref_mean_logp: Tensor | None,
    chosen: Tensor,
    rejected: Tensor,
    beta: float,
) -> Tensor:
    """AMIR-GRPO preference loss L_pref (REFERENCE.md section 2).

        z_ij   = beta * [ (l_theta(i) - l_ref(i)) - (l_theta(j) - l_ref(j)) ]
        L_pref = - mean over all pairs of the batch of log sigmoid(z_ij)

    pooled over the whole batch (not averaged per group).

    Args:
        policy_mean_logp: [B] length-normalised log-likelihood l_theta (nats per token, see
            sequence_mean_logp), with gradient.
        ref_mean_logp: [B] l_ref under the frozen reference policy, treated as a constant
            (detached); None means reference-free (l_ref = 0, the official code's default).
        chosen, rejected: LongTensors [P] of row indices, from mine_pairs.
        beta: beta_DPO > 0.

    Returns:
        scalar loss (nats). With no pairs it is 0, still connected to the graph of
        policy_mean_logp with zero gradient, so backward() works unconditionally.
    """
    beta = _check_number(beta, "beta", positive=True)
    if not isinstance(policy_mean_logp, Tensor) or policy_mean_logp.dim() != 1:
        raise ValueError("policy_mean_logp must be a 1-D tensor [B]")
    for name, index in (("chosen", chosen), ("rejected", rejected)):
        if (
            not isinstance(index, Tensor)
            or index.dim() != 1
            or index.is_floating_point()
            or index.dtype == torch.bool
        ):
            raise ValueError(f"{name} must be a 1-D integer tensor [P] of row indices")
    if chosen.shape != rejected.shape:
        raise ValueError(
            f"chosen has {chosen.numel()} pairs, rejected {rejected.numel()}: they must match"
        )
    margins = policy_mean_logp
    if ref_mean_logp is not None:
        if ref_mean_logp.shape != policy_mean_logp.shape:
            raise ValueError(
                f"ref_mean_logp has shape {tuple(ref_mean_logp.shape)}, policy_mean_logp "
                f"{tuple(policy_mean_logp.shape)}: they must match"
            )
        margins = margins - ref_mean_logp.detach().to(margins.dtype)
    z = beta * (margins[chosen] - margins[rejected])
    # sum / max(P, 1): the mean for P > 0, and a graph-connected 0 for P = 0.
    return -F.logsigmoid(z).sum() / max(chosen.numel(), 1)


class AdaptiveLambda:
    """Adaptive weight lambda_reg of the preference loss (REFERENCE.md section 2, official code).

    Band rule on a measured ratio: ratio < low -> lambda = min(max_value, up * lambda);
    ratio > high -> lambda = max(min_value, down * lambda); inside the band unchanged.

    - update(pg_loss, pref_loss): the official "loss" measure,
      ratio = lambda * L_pref / max(1e-9, L_GRPO) with the lambda before the update.
    - update_from_ratio(ratio): the same rule on an externally measured ratio (the "grad"
      measure: the trainer passes ||lambda grad L_pref|| / ||grad L_GRPO||).

    When a batch has no preference pairs the caller must not call either update
    (REFERENCE: "No pairs -> L_pref = 0 and no update of lambda").
    """

    def __init__(
        self,
        init: float = 0.01,
        low: float = 0.30,
        high: float = 0.70,
        up: float = 1.25,
        down: float = 0.8,
        min_value: float = 0.005,
        max_value: float = 0.05,
    ) -> None:
        init = _check_number(init, "init", positive=True)
        low = _check_number(low, "low", positive=False)
        high = _check_number(high, "high", positive=False)
        up = _check_number(up, "up", positive=True)
        down = _check_number(down, "down", positive=True)
        min_value = _check_number(min_value, "min_value", positive=True)
        max_value = _check_number(max_value, "max_value", positive=True)
        if not low < high:
            raise ValueError(f"AdaptiveLambda needs low < high, got low={low}, high={high}")
        if not min_value <= init <= max_value:
            raise ValueError(
                "AdaptiveLambda needs min_value <= init <= max_value, got "
                f"{min_value} <= {init} <= {max_value}"
            )
        if not up > 1:
            raise ValueError(f"AdaptiveLambda needs up > 1, got {up}")
        if not down < 1:
            raise ValueError(f"AdaptiveLambda needs 0 < down < 1, got {down}")
        self.low, self.high = low, high
        self.up, self.down = up, down
        self.min_value, self.max_value = min_value, max_value
        self._value = init

    @property
    def value(self) -> float:
        """Current lambda_reg."""
        return self._value

    def update(self, pg_loss: float, pref_loss: float) -> float:
        """Official rule: ratio = lambda * L_pref / max(1e-9, L_GRPO); returns the new lambda.

        pg_loss and pref_loss are detached scalar values (floats or 0-dim tensors).
        """
        ratio = self._value * float(pref_loss) / max(1e-9, float(pg_loss))
        return self.update_from_ratio(ratio)

    def update_from_ratio(self, ratio: float) -> float:
        """Apply the band rule to a measured ratio (>= 0, may be inf); returns the new lambda."""
        ratio = float(ratio)
        if math.isnan(ratio):
            raise ValueError("AdaptiveLambda got a NaN ratio (NaN loss or gradient norm?)")
        if ratio < self.low:
            self._value = min(self.max_value, self.up * self._value)
        elif ratio > self.high:
            self._value = max(self.min_value, self.down * self._value)
        return self._value

    def state_dict(self) -> dict[str, float]:
        """The mutable state: {"value": lambda}. Settings come from the config, not from here."""
        return {"value": self._value}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Restore lambda from state_dict(); it must lie within [min_value, max_value]."""
        if "value" not in state:
            raise KeyError(f"AdaptiveLambda state needs key 'value', got keys {sorted(state)}")
        value = _check_number(state["value"], "AdaptiveLambda state 'value'", positive=True)
        if not self.min_value <= value <= self.max_value:
            raise ValueError(
                f"AdaptiveLambda state value {value} is outside [{self.min_value}, "
                f"{self.max_value}] (were the bounds changed since the checkpoint?)"
            )
        self._value = value
