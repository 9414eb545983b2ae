"""rollout.staleness=0 (the default, sampling then learning) is the trainer as it was before
sampling ahead existed: a 3-step AMIR-GRPO + LENS run on the tiny-random model logs, step by
step, every metric main at 6043020 logged for it (tests/golden/trainer_6043020_amir_lens.json:
rewards, group shares, losses, gradient norm, pairs, lambda, LENS's all-wrong groups,
completion lengths), bit for bit on the platform that wrote the file.

The file was written by that commit's trainer with these same overrides
(`Trainer(load_run_config(None, OVERRIDES)).train()`, its metrics.jsonl without the seconds);
another CPU or thread count rounds floats otherwise, so there step 1 (sampled before any
update, where rounding cannot yet have flipped a sampled token) is compared within 1e-4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_quickstart import platform
from test_trainer import base_overrides

from groupwise.train.preflight import load_run_config
from groupwise.train.trainer import Trainer

GOLDEN = Path(__file__).parent / "golden" / "trainer_6043020_amir_lens.json"
EXTRA = [
    "train.max_steps=3",
    "reward.weights={text_hash: 1.0, binary: 1.0}",
    "reward.correctness_component=binary",
    "algorithm.amir=true",
    "algorithm.advantage=lens",
    "algorithm.margin=0.1",
    "rollout.staleness=0",
]


def test_staleness_zero_logs_what_the_trainer_before_sampling_ahead_logged(
    tmp_path: Path,
) -> None:
    golden = json.loads(GOLDEN.read_text())
    trainer = Trainer(load_run_config(None, [*base_overrides(tmp_path), *EXTRA]))
    trainer.train()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in lines]
    assert [r["staleness"] for r in logged] == [0, 0, 0]
    # the golden run has all-wrong groups with a gradient (LENS) and pairs (AMIR)
    assert all(r["group_all_wrong_active"] > 0 and r["pairs"] > 0 for r in golden["metrics"])
    if golden["platform"] == platform():
        for ours, then in zip(logged, golden["metrics"], strict=True):
            assert {key: ours[key] for key in then} == then
        return
    first, then = logged[0], golden["metrics"][0]
    assert {key: first[key] for key in then} == pytest.approx(then, rel=1e-4, abs=1e-6)
