"""groupwise's rollout correction and sampler-mismatch metrics (groupwise.algorithms.importance)
against verl 0.9.1's own functions on the same tensors (verl.trainer.ppo.rollout_corr_helper):
compute_rollout_correction_weights (its "token" and "sequence" levels, TIS with one threshold,
IcePop with "lower_upper") and compute_offpolicy_metrics. Runs in .venv-verl (scripts/test.sh).

verl clamps log-ratios to +-20 before exp; groupwise, as TRL, does not. The tensors here stay
within that bound, where the two are the same formula."""

from __future__ import annotations

import pytest
import torch
from verl.trainer.ppo.rollout_corr_helper import (
    compute_offpolicy_metrics,
    compute_rollout_correction_weights,
)

from groupwise.algorithms import (
    ImportanceCorrection,
    importance_weights,
    mismatch_metrics,
    mismatch_sums,
)


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    sampler = -torch.rand(6, 9, generator=generator, dtype=torch.float64) * 3
    old = sampler + 0.4 * torch.randn(6, 9, generator=generator, dtype=torch.float64)
    lengths = torch.tensor([9, 7, 5, 9, 2, 6])
    mask = torch.arange(9)[None, :] < lengths[:, None]
    return old, sampler, mask


@pytest.mark.parametrize(
    ("mode", "level", "threshold", "floor"),
    [
        ("token_truncate", "token", 1.5, 0.0),
        ("sequence_truncate", "sequence", 2.0, 0.0),
        ("token_mask", "token", "0.6_1.5", 0.6),
        ("sequence_mask", "sequence", "0.3_2.0", 0.3),
    ],
)
def test_peer_parity_rollout_correction_weights_equal_verls(
    mode: str, level: str, threshold: float | str, floor: float
) -> None:
    old, sampler, mask = _batch()
    cap = float(str(threshold).split("_")[-1])
    ours = importance_weights(old, sampler, mask, ImportanceCorrection(mode, cap, floor))  # type: ignore[arg-type]
    theirs, _ = compute_rollout_correction_weights(
        old - sampler, mask.double(), rollout_is=level, rollout_is_threshold=threshold
    )
    assert torch.allclose(ours[mask], theirs[mask], rtol=1e-12, atol=0)
    # the bounds bite on this batch: some weights are cut or masked, some kept as they are
    unbounded = importance_weights(old, sampler, mask, ImportanceCorrection(mode, 1e30))  # type: ignore[arg-type]
    assert (ours[mask] != unbounded[mask]).any() and (ours[mask] == unbounded[mask]).any()


def test_peer_parity_mismatch_metrics_equal_verls() -> None:
    old, sampler, mask = _batch()
    ours = mismatch_metrics(mismatch_sums(old, sampler, mask))
    theirs = compute_offpolicy_metrics(old, sampler, mask.double())
    for name, verl_name in [
        ("sampler_kl", "kl"),
        ("sampler_k3_kl", "k3_kl"),
        ("sampler_chi2_token", "chi2_token"),
        ("sampler_chi2_seq", "chi2_seq"),
    ]:
        assert ours[name] == pytest.approx(theirs[verl_name], rel=1e-9), name
