"""AMIR-GRPO implicit preferences: pair mining, DPO-style loss, adaptive lambda_reg.

docs/algorithms.md §2. Batches are group-major as in advantages.py.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from groupwise.algorithms.advantages import _as_float, _as_groups, _check_choice

PAIR_MODES = ("all", "topk")
LAMBDA_MEASURES = ("loss", "grad", "fixed")


def _check_number(value: object, name: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if not positive and not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return float(value)


def _check_pairs(chosen: Tensor, rejected: Tensor) -> None:
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


def mine_pairs(
    rewards: Tensor,
    group_size: int,
    margin: float,
    mode: str = "all",
    max_pairs_per_group: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Implicit preference pairs S(q) = {(i, j): r_i - r_j > margin} per group.

    docs/algorithms.md §2 (official code): the inequality is strict and compares the float
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


def _pair_logits(
    mean_logp: Tensor, ref_mean_logp: Tensor | None, chosen: Tensor, rejected: Tensor, beta: float
) -> Tensor:
    """z_p = beta [(l_c - l_ref,c) - (l_r - l_ref,r)] of each pair [P]; the reference is a
    constant, None is reference-free (l_ref = 0)."""
    margins = mean_logp
    if ref_mean_logp is not None:
        if ref_mean_logp.shape != mean_logp.shape:
            raise ValueError(
                f"ref_mean_logp has shape {tuple(ref_mean_logp.shape)}, the policy's "
                f"{tuple(mean_logp.shape)}: they must match"
            )
        margins = margins - ref_mean_logp.detach().to(margins.dtype)
    return beta * (margins[chosen] - margins[rejected])


def preference_loss(
    policy_mean_logp: Tensor,
    ref_mean_logp: Tensor | None,
    chosen: Tensor,
    rejected: Tensor,
    beta: float,
) -> Tensor:
    """AMIR-GRPO preference loss L_pref (docs/algorithms.md §2).

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
    _check_pairs(chosen, rejected)
    z = _pair_logits(policy_mean_logp, ref_mean_logp, chosen, rejected, beta)
    # sum / max(P, 1): the mean for P > 0, and a graph-connected 0 for P = 0.
    return -F.logsigmoid(z).sum() / max(chosen.numel(), 1)


@dataclass(frozen=True)
class PreferenceTerms:
    """AMIR-GRPO's preference term at the rollout policy, in per-completion form.

    coefficients: [B] c_k = dL_pref / dl_k at l = l_old (0 for a completion in no pair);
        the loss adds lambda * sum_k c_k * l_k(theta) (preference_surrogate).
    pair_losses: [P] -log sigmoid(z_p) of each pair at l_old (nats); L_pref is their sum over
        the whole batch divided by its pair count.
    logp_margins: [P] l_old(chosen) - l_old(rejected) of each pair (nats per token).
    """

    coefficients: Tensor
    pair_losses: Tensor
    logp_margins: Tensor


def preference_coefficients(
    mean_logp_old: Tensor,
    ref_mean_logp: Tensor | None,
    chosen: Tensor,
    rejected: Tensor,
    beta: float,
    num_pairs: int | None = None,
) -> PreferenceTerms:
    """L_pref as one coefficient per completion, c_k = dL_pref / dl_k at l = l_old.

    docs/algorithms.md §2. With z_p = beta [(l_c - l_ref,c) - (l_r - l_ref,r)] for pair p = (c, r)
    and L_pref = -(1/P) sum_p log sigmoid(z_p):

        c_k = -(beta / P) [ sum_{p: c_p = k} sigmoid(-z_p) - sum_{p: r_p = k} sigmoid(-z_p) ]

    evaluated at the rollout policy's l_old. The engine adds lambda * sum_k c_k l_k(theta) to its
    loss. While theta is the rollout policy (the first update of a rollout batch: one mini-batch,
    first epoch) its gradient is exactly lambda * grad L_pref; it is a sum over rows, so any
    split into micro-batches or processes adds up to it with no pooling of pairs. After the
    policy has moved (mini-batches 2+, epochs 2+) it is the first-order expansion of L_pref
    around l_old: the pairs' weights sigmoid(-z) stay those of the rollout policy, as
    advantages stay fixed in the clipped surrogate, instead of following theta.

    Args:
        mean_logp_old: [B] l(q, o) under the rollout policy (nats per token); detached here.
        ref_mean_logp: [B] l_ref under the reference policy, or None (reference-free: l_ref = 0).
        chosen, rejected: LongTensors [P] of row indices into these B rows (mine_pairs).
        beta: beta_DPO > 0.
        num_pairs: P, the pair count L_pref is averaged over: by default chosen.numel(); pass
            the whole batch's count when these rows are one part of it, so that the parts'
            coefficients add up to the batch's.

    Returns:
        PreferenceTerms (coefficients [B] in mean_logp_old's float dtype, pair_losses [P],
        logp_margins [P]).
    """
    beta = _check_number(beta, "beta", positive=True)
    if not isinstance(mean_logp_old, Tensor) or mean_logp_old.dim() != 1:
        raise ValueError("mean_logp_old must be a 1-D tensor [B]")
    _check_pairs(chosen, rejected)
    pairs = chosen.numel() if num_pairs is None else num_pairs
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < chosen.numel():
        raise ValueError(
            f"num_pairs must be an int >= {chosen.numel()} (the pairs given), got {pairs!r}"
        )
    l_old = _as_float(mean_logp_old, "mean_logp_old").detach()
    z = _pair_logits(l_old, ref_mean_logp, chosen, rejected, beta)
    weight = torch.sigmoid(-z) * (beta / max(pairs, 1))
    coefficients = torch.zeros_like(l_old)
    coefficients.index_add_(0, chosen, -weight)
    coefficients.index_add_(0, rejected, weight)
    return PreferenceTerms(coefficients, -F.logsigmoid(z), l_old[chosen] - l_old[rejected])


def preference_surrogate(policy_mean_logp: Tensor, coefficients: Tensor) -> Tensor:
    """sum_k c_k * l_k(theta): the AMIR term an engine adds to its loss, times lambda_reg.

    Its gradient is the gradient of L_pref at the rollout policy (preference_coefficients);
    its value is not L_pref (log PreferenceTerms.pair_losses for that).

    Args:
        policy_mean_logp: [b] l(q, o) under the current policy, with gradient.
        coefficients: [b] c_k for the same rows (a constant).

    Returns:
        scalar, differentiable w.r.t. policy_mean_logp.
    """
    if policy_mean_logp.shape != coefficients.shape:
        raise ValueError(
            f"coefficients have shape {tuple(coefficients.shape)}, policy_mean_logp "
            f"{tuple(policy_mean_logp.shape)}: one per completion"
        )
    return (coefficients.detach().to(policy_mean_logp.dtype) * policy_mean_logp).sum()


class AdaptiveLambda:
    """Adaptive weight lambda_reg of the preference loss and how it is measured
    (docs/algorithms.md §2).

    Band rule on a measured ratio: ratio < low -> lambda = min(max_value, up * lambda);
    ratio > high -> lambda = max(min_value, down * lambda); inside the band unchanged.

    measure (who calls what, once per loss computation that has pairs):
    - "loss" (official code): observe_losses(L_GRPO, L_pref), ratio = lambda * L_pref /
      max(1e-9, L_GRPO) with the lambda before the update, applied before combining;
    - "grad" (ours): every `every` steps (measures_gradient(step)), observe_gradient_norms(
      ||grad L_GRPO||, ||grad L_pref||), ratio = lambda * ||grad L_pref|| / ||grad L_GRPO||;
    - "fixed": lambda stays at init.
    update(pg, pref) and update_from_ratio(ratio) apply the rule itself, whatever the measure.

    When a batch has no preference pairs nothing is observed (REFERENCE: "No pairs -> L_pref
    = 0 and no update of lambda").

    A rule that keeps lambda at a bound is not adapting: after BOUND_WARNING_UPDATES consecutive
    updates that leave it at min_value or max_value, it warns once, naming the measure (with
    "loss" on whole groups on-policy, L_GRPO is about 0 and lambda sinks to its floor).
    """

    BOUND_WARNING_UPDATES = 20

    def __init__(
        self,
        init: float = 0.01,
        low: float = 0.30,
        high: float = 0.70,
        up: float = 1.25,
        down: float = 0.8,
        min_value: float = 0.005,
        max_value: float = 0.05,
        measure: str = "loss",
        every: int = 1,
    ) -> None:
        _check_choice(measure, "measure", LAMBDA_MEASURES)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1, got {every!r}")
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
        self.measure, self.every = measure, every
        self._value = init
        self.bound_streak = 0
        self._warned = False

    def measures_gradient(self, step: int) -> bool:
        """Whether the engine should keep grad L_pref apart at this step (measure "grad")."""
        return self.measure == "grad" and step % self.every == 0

    def observe_losses(self, pg_loss: float, pref_loss: float) -> float:
        """Measure "loss": the official update from one loss computation's detached L_GRPO and
        L_pref (only where it had pairs); other measures ignore it. Returns lambda."""
        return self.update(pg_loss, pref_loss) if self.measure == "loss" else self._value

    def observe_gradient_norms(self, pg_norm: float, pref_norm: float) -> float:
        """Measure "grad": ratio = lambda * ||grad L_pref|| / ||grad L_GRPO|| (norms of the
        unweighted terms over the trainable parameters); no update when ||grad L_pref|| = 0 (no
        pairs). Returns lambda."""
        if self.measure != "grad" or not float(pref_norm) > 0:
            return self._value
        return self.update_from_ratio(self._value * float(pref_norm) / max(1e-12, float(pg_norm)))

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
        at_bound = self._value in (self.min_value, self.max_value)
        self.bound_streak = self.bound_streak + 1 if at_bound else 0
        if self.bound_streak == self.BOUND_WARNING_UPDATES and not self._warned:
            self._warned = True
            warnings.warn(self._bound_message(), stacklevel=2)
        return self._value

    def _bound_message(self) -> str:
        floor = self._value == self.min_value
        side, band = ("floor", f"above {self.high}") if floor else ("ceiling", f"below {self.low}")
        why = (
            (
                " (with the loss measure on-policy micro-batches of whole groups have L_GRPO "
                "about 0, so the ratio is large)"
            )
            if floor and self.measure == "loss"
            else ""
        )
        return (
            f"lambda_reg has sat at its {side} {self._value:g} for {self.bound_streak} "
            f"consecutive updates of the rule: the measured ratio (measure "
            f"{self.measure!r}) stays {band}{why}. The AMIR term's weight is then the bound, "
            "not an adapted value; widen the bounds or choose another measure "
            "(docs/algorithms.md §2; this warning is shown once)"
        )

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
