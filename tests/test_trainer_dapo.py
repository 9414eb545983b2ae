"""DAPO in groupwise's trainer on tiny-random: dynamic sampling trains on the kept groups and
logs what its draws cost, resumes to the same metrics, a budget of completions ends the run,
the soft overlong punishment is a reward column, and masked truncated completions leave the
loss and AMIR's pairs (docs/algorithms.md, "Dynamic sampling", "Overlong completions")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_trainer import TESTS, _comparable, base_overrides, logged, make_trainer, trainable

from groupwise.config import ConfigError
from groupwise.data import load_benchmark
from groupwise.train.config_file import load_config
from groupwise.train.sampler import ProblemSampler

# Q = 2 questions x G = 4; text_hash gives 3.0 to about a third of texts, so some groups of 4
# have constant rewards and the "reward" filter drops them.
DYNAMIC = [
    "rollout.dynamic_sampling=true",
    "rollout.filter_metric=reward",
    "rollout.max_draws=6",
    "train.seed=1",  # a seed whose steps 1 and 3 draw again
]


def test_dynamic_sampling_trains_on_kept_groups_and_logs_its_draws(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, *DYNAMIC, "train.max_steps=4")
    trainer.train()
    records = logged(tmp_path / "metrics.jsonl")
    samples = logged(tmp_path / "rollouts.jsonl")
    drawn = 0
    for record, sample in zip(records, samples, strict=True):
        draws = record["draws"]
        drawn += draws
        assert 1 <= draws <= 6
        assert record["completions_sampled"] == draws * 2 * 4
        dropped = sum(record[f"groups_dropped_{k}"] for k in ("all_correct", "all_wrong", "mixed"))
        assert record["groups_kept"] + dropped == draws * 2
        hashes = torch.tensor(sample["reward_columns"]["text_hash"]).reshape(2, 4)
        constant = int((hashes == hashes[:, :1]).all(dim=1).sum())
        assert constant == record["groups_filled"]  # only filled groups may be constant
    assert any(r["draws"] > 1 for r in records)  # some step had to draw again
    assert trainer.batches.position == drawn * 2  # the data position: every question drawn


def test_dynamic_sampling_resumes_to_the_same_metrics(tmp_path: Path) -> None:
    extra = [*DYNAMIC, "train.max_steps=4", "train.save_every=2"]
    make_trainer(tmp_path / "straight", *extra).train()
    interrupted = make_trainer(tmp_path / "resumed", *extra)
    for _ in range(3):
        record, _ = interrupted.train_step()
        interrupted.step += 1
        interrupted.log.write(record)
        if interrupted.step % 2 == 0:
            interrupted.save()
    interrupted.close()
    resumed = make_trainer(tmp_path / "resumed", *extra, resume=True)
    assert resumed.step == 2
    straight = logged(tmp_path / "straight" / "metrics.jsonl")
    assert resumed.batches.position == sum(r["draws"] for r in straight[:2]) * 2
    resumed.train()
    again = logged(tmp_path / "resumed" / "metrics.jsonl")
    assert _comparable(again) == _comparable(straight)


def test_out_of_draws_the_step_trains_on_dropped_groups(tmp_path: Path) -> None:
    # tiny-random never answers correctly: every group is all-wrong and "correct" drops it
    trainer = make_trainer(
        tmp_path, "rollout.dynamic_sampling=true", "rollout.max_draws=3", "train.max_steps=1"
    )
    # groupwise's own rule, said in the log: verl's trainers do otherwise
    with pytest.warns(UserWarning, match=r"rollout.max_draws=3 draws did not give a step .* verl"):
        trainer.train()
    record = logged(tmp_path / "metrics.jsonl")[0]
    assert record["draws"] == 3 and record["completions_sampled"] == 24
    assert record["groups_kept"] == 0 and record["groups_dropped_all_wrong"] == 6
    assert record["groups_filled"] == 2


def test_a_budget_of_completions_ends_the_run(tmp_path: Path) -> None:
    # 8 completions per step: the budget of 12 is reached after step 2 of 5
    trainer = make_trainer(tmp_path, "train.max_steps=5", "train.max_completions=12")
    trainer.train()
    records = logged(tmp_path / "metrics.jsonl")
    assert [r["completions_sampled"] for r in records] == [8, 8]
    assert (tmp_path / "final" / "adapter").is_dir()


def test_soft_overlong_punishment_is_a_reward_column(tmp_path: Path) -> None:
    # max_new_tokens 8, buffer 4: a completion of n tokens gets min(0, (4 - n) / 4)
    make_trainer(tmp_path, "reward.overlong_buffer=4", "train.max_steps=1").train()
    sample = logged(tmp_path / "rollouts.jsonl")[0]
    columns = sample["reward_columns"]
    record = logged(tmp_path / "metrics.jsonl")[0]
    assert record["completion_length_mean"] == 8.0  # tiny-random writes to the limit
    assert columns["overlong"] == [-1.0] * 8
    assert sample["rewards"] == [h - 1.0 for h in columns["text_hash"]]


def test_masked_truncated_completions_leave_the_loss_and_the_pairs(tmp_path: Path) -> None:
    # every completion is cut at max_new_tokens: masked, no token is left in the loss
    extra = ["algorithm.amir=true", "train.max_steps=1", "optim.weight_decay=0"]
    trainer = make_trainer(tmp_path / "masked", *extra, "algorithm.mask_truncated=true")
    before = trainable(trainer)
    trainer.train()
    record = logged(tmp_path / "masked" / "metrics.jsonl")[0]
    assert record["truncated_fraction"] == 1.0
    assert record["pairs"] == 0 and record["grad_norm"] == 0.0
    assert record["advantage_abs_mean"] > 0  # the advantages are unchanged: statistics keep them
    assert all(torch.equal(a, b) for a, b in zip(before, trainable(trainer), strict=True))
    make_trainer(tmp_path / "plain", *extra).train()
    plain = logged(tmp_path / "plain" / "metrics.jsonl")[0]
    assert plain["pairs"] > 0 and plain["grad_norm"] > 0
    assert plain["advantage_abs_mean"] == record["advantage_abs_mean"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rollout.filter_metric=shaped"], "rollout.filter_metric=shaped .* needs algorithm"),
        (["rollout.max_draws=0"], "rollout.max_draws must be >= 1"),
        (["reward.overlong_buffer=300"], "reward.overlong_buffer=300 must not exceed"),
        (["train.max_completions=-1"], "train.max_completions must be >= 0"),
    ],
)
def test_bad_dapo_settings_name_the_option(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_two_processes_fill_their_own_slots_with_their_own_kept_groups(tmp_path: Path) -> None:
    # torchrun, 2 processes, Q = 2: process 0 owns question 0 of every draw, process 1
    # question 1; each fills its slot with a kept group of its own question, in draw order.
    env = {
        **os.environ,
        "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    run = tmp_path / "run"
    overrides = [*base_overrides(run), *DYNAMIC, "train.max_steps=3", "reward.workers=1"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run(
        [*launcher, "-m", "groupwise", "train", *overrides], env=env, capture_output=True
    )
    assert done.returncode == 0, done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:]
    records, samples = logged(run / "metrics.jsonl"), logged(run / "rollouts.jsonl")
    config = load_config(run / "config.yaml")
    sampler = ProblemSampler(
        load_benchmark(config.data.benchmark, config.data.split),
        2,
        config.train.seed,
        config.data.shuffle,
    )
    position = 0
    for record, sample in zip(records, samples, strict=True):
        drawn = [sampler.questions(position + 2 * d) for d in range(record["draws"])]
        position += 2 * record["draws"]
        assert record["completions_sampled"] == record["draws"] * 8
        hashes = torch.tensor(sample["reward_columns"]["text_hash"]).reshape(2, 4)
        constant = (hashes == hashes[:, :1]).all(dim=1)
        assert int(constant.sum()) == record["groups_filled"]
        for slot, problem_id in enumerate(sample["problem_ids"]):
            # the slot's group was drawn as question `slot` (its process's) of some draw
            assert problem_id in [draw[slot].id for draw in drawn]
    assert any(r["draws"] > 1 for r in records)
