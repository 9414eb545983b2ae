"""groupwise's answer checking as verl's reward function (docs/guides/verl.md, "Data and
reward").

    reward.custom_reward_function.path=pkg://groupwise.integrations.verl.reward
    reward.custom_reward_function.name=compute_score

The score is the correctness, 1.0 or 0.0 (so algorithm.groupwise.correctness_value keeps its
default 1.0 and LENS reads it as is), with `acc` the same as a bool in verl's reward extra info
(validation's acc/mean@N and pass@k, algorithm.groupwise.correctness_key=acc). The checking mode
is the row's extra_info["checking"] (groupwise.integrations.verl.data writes it), else groupwise's
default mode.
"""

from __future__ import annotations

from typing import Any

from groupwise.rewards.checking import DEFAULT_MODE
from groupwise.rewards.pool import is_correct


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **unused: Any,
) -> dict[str, float | bool]:
    """verl's custom reward signature: {"score": 1.0 | 0.0, "acc": bool} of one response
    `solution_str` against the gold `ground_truth`, judged by groupwise.rewards.pool.is_correct
    (under its hard timeout: a pathological answer cannot stall verl's reward workers)."""
    mode = (extra_info or {}).get("checking") or DEFAULT_MODE
    correct = is_correct(solution_str, str(ground_truth), mode=mode)
    return {"score": 1.0 if correct else 0.0, "acc": correct}
