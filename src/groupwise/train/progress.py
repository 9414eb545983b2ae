"""What the training progress bar shows after each step: each method's own signal.

- every method: training accuracy, the shares of mixed / all-correct / all-wrong groups (only
  mixed groups carry a GRPO gradient) and the share of groups that are all-wrong yet got a
  gradient (a non-zero advantage: LENS's calibrated negatives; always 0 under GRPO);
- AMIR-GRPO: the preference pairs mined per group and lambda_reg (docs/algorithms.md §2);
- the latest held-out accuracy when train.eval_every is on (groupwise.train.heldout);
- in a step where some answers were compared as text (math-verify could not parse them),
  timed out or errored, their counts (a warning line only for timeouts and errors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from groupwise.algorithms import group_types

__all__ = ["ProgressLine", "all_wrong_with_gradient"]


def all_wrong_with_gradient(
    correct: torch.Tensor, advantages: torch.Tensor, group_size: int
) -> float:
    """Fraction of the groups whose answers are all wrong and whose advantages are not all 0,
    so that the group moves the policy (docs/algorithms.md §3: LENS gives such groups negative
    advantages; GRPO gives them 0). correct: [B] bool, advantages: [B], group-major."""
    all_wrong = group_types(correct, group_size)["all_wrong"]
    active = (advantages.view(-1, group_size) != 0).any(dim=1)
    return float((all_wrong & active).float().mean())


class ProgressLine:
    """The bar's postfix, built from each step's metrics.jsonl line; remembers the latest
    held-out accuracy between evaluations."""

    def __init__(self) -> None:
        self.heldout: float | None = None

    def postfix(self, record: Mapping[str, Any]) -> dict[str, str]:
        """{label: value} for tqdm's set_postfix (kept in this order)."""
        if "heldout_accuracy" in record:
            self.heldout = float(record["heldout_accuracy"])
        shares = (record["group_mixed"], record["group_all_correct"], record["group_all_wrong"])
        line = {
            "reward": f"{record['reward_mean']:.3f}",
            "acc": f"{record['accuracy']:.2f}",
            "groups mixed/right/wrong": "/".join(f"{100 * share:.0f}" for share in shares) + "%",
            "all-wrong with grad": f"{record['group_all_wrong_active']:.0%}",
        }
        if "lambda" in record:
            line["pairs/group"] = f"{record['pairs_per_group']:.1f}"
            line["lam"] = f"{record['lambda']:.4f}"
        if self.heldout is not None:
            line["heldout"] = f"{self.heldout:.1%}"
        checks = [record.get(f"answers_{k}", 0) for k in ("unparsed", "timeout", "error")]
        if any(checks):  # answers compared as text / timed out / errored in this step
            line["checks text/timeout/err"] = "/".join(str(int(c)) for c in checks)
        line["tok/s"] = f"{record['tokens_per_second']:.0f}"
        return line
