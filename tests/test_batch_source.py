"""train/batch_source.py: the sampler's side of a step, with rollout.staleness=1 (sampling ahead
of learning) driven through the real trainer on the tiny-random model, with a recording
generator in place of vLLM (the engine itself: tests/test_vllm_train.py). What is checked:
the batch sampled ahead is sampled with the weights as they were before the update it runs
beside (synced on the main thread, sampled in the background without a sync); each step's
staleness; the data positions; a checkpoint's batch sampled ahead comes back on resume; and
the refusals at start."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from test_trainer import base_overrides

from groupwise.config import ConfigError
from groupwise.rollout import Rollouts
from groupwise.train.config_file import load_config
from groupwise.train.preflight import load_run_config
from groupwise.train.trainer import Trainer


class RecordingGenerator:
    """A generator as the vllm engine behaves: it samples with the weights of its last sync;
    here its completions are drawn from each prompt's seed and a fingerprint of those weights
    (so they show which weights sampled them, and no thread reads the policy mid-update). It
    records each sync and generate: the thread and the fingerprint."""

    def __init__(self, tokenizer: Any, params: list[torch.Tensor]) -> None:
        self.tokenizer, self.params = tokenizer, params
        self.calls: list[tuple[str, str, float]] = []
        self.synced = self._fingerprint()

    def _fingerprint(self) -> float:
        return float(sum(p.detach().double().sum() for p in self.params))

    def sync(self) -> bool:
        self.synced = self._fingerprint()
        self.calls.append(("sync", threading.current_thread().name, self.synced))
        return True

    def generate(
        self, prompts: list[str], n: int, sampling: Any, prompt_seeds: list[int], sync: bool = True
    ) -> Rollouts:
        if sync:
            self.sync()
        self.calls.append(("generate", threading.current_thread().name, self.synced))
        encoded = [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
        width = max(len(ids) for ids in encoded)
        prompt_ids = torch.tensor([[0] * (width - len(ids)) + ids for ids in encoded])
        prompt_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
        weights = int(abs(self.synced) * 1e6) % 2**31
        draws = [torch.Generator().manual_seed(seed * 7919 + weights) for seed in prompt_seeds]
        size = (n, sampling.max_new_tokens)
        completion_ids = torch.cat([torch.randint(10, 200, size, generator=g) for g in draws])
        return Rollouts(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=completion_ids,
            completion_mask=torch.ones_like(completion_ids),
            texts=self.tokenizer.batch_decode(completion_ids, skip_special_tokens=True),
            truncated=torch.ones(len(completion_ids), dtype=torch.bool),
            group_size=n,
        )


def _trainer(run_dir: Path, *extra: str, resume: bool = False) -> Trainer:
    config = load_run_config(None, [*base_overrides(run_dir), "train.max_steps=3", *extra])
    config.rollout.staleness = 1  # the config refuses it without vLLM; the trainer runs it
    trainer = Trainer(config, resume=resume)
    recording = RecordingGenerator(trainer.tokenizer, trainer.params)
    trainer.batches.generator = recording
    return trainer


def test_the_batch_ahead_is_sampled_with_the_weights_before_the_update(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path / "run")
    recording = trainer.batches.generator
    before: list[float] = []
    learn = trainer.learn

    def learn_recording(batch: Any) -> Any:
        before.append(recording._fingerprint())
        return learn(batch)

    trainer.learn = learn_recording  # type: ignore[method-assign]
    records = []
    for _ in range(3):
        record, _ = trainer.train_step()
        trainer.step += 1
        records.append(record)
    trainer.batches.close()
    trainer.close()
    assert [r["staleness"] for r in records] == [0, 1, 1]
    assert [r["completions_sampled"] for r in records] == [8, 8, 8]
    generated = [
        (thread, weights) for kind, thread, weights in recording.calls if kind == "generate"
    ]
    # step 1 sampled in the step, steps 2 and 3 in the background thread, each with the
    # weights of the sync before the update it ran beside (steps 1 and 2's); the last step
    # samples nothing ahead
    assert len(generated) == 3
    assert generated[0][0] == threading.main_thread().name
    assert all(thread.startswith("sampler") for thread, _ in generated[1:])
    assert [weights for _, weights in generated[1:]] == before[:2]
    syncs = [thread for kind, thread, _ in recording.calls if kind == "sync"]
    assert all(thread == threading.main_thread().name for thread in syncs)
    assert before[0] != before[1] != before[2]  # the updates moved the weights
    assert trainer.batches.position == 3 * 2


def test_a_checkpoint_keeps_the_batch_sampled_ahead(tmp_path: Path) -> None:
    """Stopped after step 1 (its checkpoint holds batch 2, sampled ahead), the resumed run
    learns batch 2 without sampling it again, and its completions are the ones the
    uninterrupted run learned at step 2."""
    straight = _trainer(tmp_path / "straight", "train.max_steps=2", "train.save_every=1")
    straight.train()
    lines = (tmp_path / "straight" / "rollouts.jsonl").read_text().splitlines()

    stopped = _trainer(tmp_path / "stopped", "train.max_steps=2", "train.save_every=1")
    stopped._logged_step()
    stopped.batches.close()
    stopped.close()
    resumed = _trainer(tmp_path / "stopped", "train.max_steps=2", resume=True)
    assert resumed.step == 1 and resumed.batches.position == 2
    resumed.train()
    generated = [c for c in resumed.batches.generator.calls if c[0] == "generate"]
    assert generated == []  # step 2's batch came from the checkpoint
    again = (tmp_path / "stopped" / "rollouts.jsonl").read_text().splitlines()
    assert again[1] == lines[1]


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ([], r"rollout.staleness=1 needs rollout.engine=vllm"),
        (
            ["rollout.engine=vllm", "rollout.dynamic_sampling=true"],
            r"needs rollout.dynamic_sampling=false",
        ),
        (
            ["rollout.engine=vllm", "rollout.logp_old=sampler"],
            r"needs rollout.logp_old=recompute \(the sampler's log-probs are one update old",
        ),
    ],
)
def test_sampling_ahead_is_refused_where_it_cannot_run(overrides: list[str], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        load_config(None, ["rollout.staleness=1", *overrides])
    with pytest.raises(ConfigError, match="rollout.staleness"):
        load_config(None, ["rollout.engine=vllm", "rollout.staleness=2"])
