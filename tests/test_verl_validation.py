"""Unbiased pass@k in verl 0.9.1's validation (docs/guides/verl.md, "Validation: unbiased
pass@k"): hand-computed values, verl's biased best@N beside them, and the wrapped
`_val_metrics_update` of verl's trainers. Run in .venv-verl (scripts/setup_verl.sh)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from verl.trainer.ppo.metric_utils import process_validation_metrics
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from groupwise.integrations.verl.validation import (
    correctness,
    failures_as_wrong,
    validation_pass_at_k,
    with_pass_at_k,
)

SOURCES = ["gsm8k"] * 8
UIDS = ["p0"] * 4 + ["p1"] * 4
ACC = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]  # 1 and 3 correct of n = 4


def test_hand_computed_pass_at_k():
    metrics = validation_pass_at_k(SOURCES, UIDS, [a > 0 for a in ACC])
    assert metrics["val-aux/gsm8k/acc/pass@1"] == pytest.approx((0.25 + 0.75) / 2)
    # pass@2: (1 - C(3,2)/C(4,2)) = 0.5 for p0, 1 for p1
    assert metrics["val-aux/gsm8k/acc/pass@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert metrics["val-core/gsm8k/acc/pass@4"] == 1.0
    low, high = metrics["val-aux/gsm8k/acc/pass@1/low"], metrics["val-aux/gsm8k/acc/pass@1/high"]
    assert low <= 0.5 <= high


def test_verl_best_at_n_is_biased_where_pass_at_k_is_not():
    """1 correct of 4: every 4-sample draw without replacement holds it (pass@4 = 1); verl's
    bootstrap draws with replacement, so its best@4 is about 1 - (3/4)^4 = 0.68 (verl#7240)."""
    verl = process_validation_metrics(["d"] * 4, ["p"] * 4, {"acc": [1.0, 0.0, 0.0, 0.0]})
    best = float(verl["d"]["acc"]["best@4/mean"])
    ours = validation_pass_at_k(["d"] * 4, ["p"] * 4, [True, False, False, False])
    assert best == pytest.approx(1 - 0.75**4, abs=0.05) and best < 1.0
    assert ours["val-core/d/acc/pass@4"] == 1.0
    assert float(verl["d"]["acc"]["mean@4"]) == ours["val-aux/d/acc/pass@1"] == 0.25


def test_correctness_uses_acc_else_reward():
    assert correctness({"reward": [0.0, 2.0], "acc": [1, 0]}) == ("acc", [True, False])
    assert correctness({"reward": [0.0, 2.0]}) == ("reward", [False, True])
    assert correctness({"reward": [0.0, 2.0], "acc": [None, 1]}) == ("reward", [False, True])


def test_bad_input():
    with pytest.raises(ValueError, match="one entry per sample"):
        validation_pass_at_k(["d"] * 3, ["p"] * 4, [True] * 4)
    with pytest.raises(ValueError, match="data source 'd'.*differing sample counts"):
        validation_pass_at_k(["d"] * 5, ["p"] * 4 + ["q"], [True] * 5)
    with pytest.raises(ValueError, match="ks"):
        validation_pass_at_k(["d"] * 4, ["p"] * 4, [True] * 4, ks=[8])


@pytest.mark.parametrize("base", [RayPPOTrainer, PPOTrainer])
def test_wrapped_val_metrics_update(base):
    """As `_validate` calls it: verl's keys and values unchanged, groupwise's beside them; the
    class not wrapped gives exactly verl's keys. Subclasses, so that verl's classes stay as they
    are; verl's method reads nothing of self, so there is no trainer to build."""
    plain = type("Plain", (base,), {})
    wrapped = with_pass_at_k(type("Wrapped", (base,), {}))
    assert with_pass_at_k(wrapped) is wrapped
    assert not hasattr(base._val_metrics_update, "groupwise_pass_at_k")
    infos = {"reward": list(ACC), "acc": list(ACC)}
    args = (np.array(SOURCES, dtype=object), UIDS, infos, [])
    verl = plain._val_metrics_update(None, *args)
    both = wrapped._val_metrics_update(None, *args)
    ours = validation_pass_at_k(SOURCES, UIDS, [a > 0 for a in ACC])
    assert "val-core/gsm8k/acc/best@4/mean" in verl and not any("pass@" in k for k in verl)
    assert {k: both[k] for k in verl} == verl
    assert {k: both[k] for k in ours} == ours and set(both) == set(verl) | set(ours)


def test_v1_failed_sessions_count_as_wrong():
    """verl v1 passes expected_acc_counts: a failed session is missing from the samples, and
    counts as wrong (as in verl's acc), so every problem keeps n = 4."""
    expected = {("gsm8k", "p0"): 4, ("gsm8k", "p1"): 4}
    sources, uids, correct = failures_as_wrong(
        SOURCES[:7], UIDS[:7], [a > 0 for a in ACC[:7]], expected
    )
    assert len(sources) == 8 and (sources[-1], uids[-1], correct[-1]) == ("gsm8k", "p1", False)
    wrapped = with_pass_at_k(type("Wrapped", (PPOTrainer,), {}))
    infos = {"reward": ACC[:7], "acc": ACC[:7]}
    got = wrapped._val_metrics_update(
        None, SOURCES[:7], UIDS[:7], infos, [], expected_acc_counts=expected
    )
    assert got["val-core/gsm8k/acc/pass@4"] == 1.0
    assert got["val-aux/gsm8k/acc/pass@1"] == pytest.approx(got["val-core/gsm8k/acc/mean@4"])


def test_install_wraps_both_trainers():
    """In a fresh process (install changes verl's classes), as Ray's setup hook runs it."""
    code = (
        "from groupwise.integrations.verl.validation import install; install(); "
        "from verl.trainer.ppo.ray_trainer import RayPPOTrainer as A; "
        "from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync as B; "
        "assert A._val_metrics_update.groupwise_pass_at_k; "
        "assert B._val_metrics_update.groupwise_pass_at_k"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
