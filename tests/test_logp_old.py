"""rollout.logp_old: logp_old from the sampler's log-probs instead of the trainer's own pass
(docs/algorithms.md §1, "Where logp_old comes from"), on the tiny-random trainer with the
sampler's log-probs set by hand: LENS + AMIR over two mini-batches, where recompute runs a
no-grad pass before the first update and the later mini-batch's ratio reads logp_old."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from test_trainer import PATHS, base_overrides

from groupwise.algorithms.logprobs import sequence_mean_logp
from groupwise.config import ConfigError
from groupwise.train.preflight import load_run_config
from groupwise.train.trainer import Trainer

OVERRIDES = [*PATHS["amir_plus_lens"], "rollout.temperature=0.7", "algorithm.minibatches=2"]


def _step(tmp_path: Path, source: str, shift: float):
    """One step with rollout.logp_old=`source` on the trainer's own rollouts, the sampler's
    log-probs set to the trainer's rollout-policy log-probs minus `shift` per token on every
    other row; returns the batch, the Learned, the sampler's log-probs, the weights after, the
    run's algorithm and its targets."""
    config = load_run_config(None, [*base_overrides(tmp_path), *OVERRIDES])
    config.rollout.logp_old = source  # the config refuses it without vLLM; the learner takes it
    trainer = Trainer(config)
    problems = trainer.sampler.batch(0)
    questions = list(range(len(problems)))
    batch = trainer.batches.score(
        problems, questions, trainer.batches.rollout(problems, questions, trainer.batches.position)
    )
    rollouts = batch.rollouts
    with torch.no_grad():
        own = trainer.passes.logprobs(rollouts, slice(0, len(rollouts)))
    shifted = torch.arange(len(rollouts)) % 2 == 1
    sampler = (own - shift * shifted[:, None]) * rollouts.completion_mask
    batch = dataclasses.replace(batch, rollouts=dataclasses.replace(rollouts, sampler_logp=sampler))
    learned = trainer.learn(batch)
    weights = [p.detach().clone() for p in trainer.params]
    algorithm, targets = trainer.learner.algorithm, trainer.learner.targets
    trainer.close()
    return batch, learned, sampler, weights, algorithm, targets


def test_the_samplers_own_logprobs_give_the_recomputed_step_without_the_pass(tmp_path) -> None:
    """A sampler whose log-probs are the trainer's: the same targets, losses and weights as
    recomputing them, and no no-grad pass (seconds_old_policy 0)."""
    _, recomputed, _, recomputed_weights, _, _ = _step(tmp_path / "recompute", "recompute", 0.0)
    _, sampled, _, sampled_weights, _, _ = _step(tmp_path / "sampler", "sampler", 0.0)
    assert recomputed.seconds_old_policy > 0 and sampled.seconds_old_policy == 0.0
    torch.testing.assert_close(sampled.targets.advantages, recomputed.targets.advantages)
    assert torch.equal(sampled.targets.chosen, recomputed.targets.chosen)
    assert len(sampled.updates) == len(recomputed.updates) == 2
    for ours, theirs in zip(sampled.updates, recomputed.updates, strict=True):
        assert ours["policy_loss"] == pytest.approx(theirs["policy_loss"], abs=1e-6)
    # logp_old from one pass over all rows against the micro-batches' passes: float32 rounding,
    # which Adam's first step (g / sqrt(g^2)) enlarges on weights whose gradient is near 0:
    # up to 1.3e-5 measured on an AMD EPYC, 0 on the Intel machine the test was written on
    for ours, theirs in zip(sampled_weights, recomputed_weights, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-5)
    assert sampled.sampler["sampling_logp_difference"] < 1e-5


def test_the_targets_read_the_samplers_logprobs_and_the_gap_is_measured(tmp_path) -> None:
    """Sampler log-probs 0.25 nats a token below the trainer's on every other row: LENS's
    confidences read them (the advantages are the algorithm's on the sampler's l_old, not the
    trainer's), and the first update's passes, at the rollout policy (mini-batch 1: rows 0-3),
    measure the gap: 0.25 on the odd rows' tokens, 0 on the others'."""
    batch, learned, sampler, _, algorithm, targets = _step(tmp_path, "sampler", 0.25)
    mask = batch.rollouts.completion_mask.bool()
    rewards = batch.group_rewards(
        slice(None),
        targets.group_size,
        targets.component,
        sequence_mean_logp(sampler, mask),
        mask.sum(dim=1).float(),
    )
    want = algorithm.targets(rewards, coefficients=False)
    torch.testing.assert_close(learned.targets.advantages, want.advantages)
    tokens = mask[:4].sum(dim=1).float()
    share = float(tokens[1::2].sum() / tokens.sum())
    assert learned.sampler["sampling_logp_difference"] == pytest.approx(0.25 * share, abs=1e-5)
    assert learned.sampler["sampling_logp_difference_max"] == pytest.approx(0.25, abs=1e-5)
    # the trainer's own l_old would have given other LENS advantages to the all-wrong groups
    own = batch.group_rewards(
        slice(None),
        targets.group_size,
        targets.component,
        sequence_mean_logp(
            sampler + 0.25 * (torch.arange(len(mask)) % 2 == 1)[:, None] * mask, mask
        ),
        mask.sum(dim=1).float(),
    )
    theirs = algorithm.targets(own, coefficients=False).advantages
    assert not torch.allclose(theirs, want.advantages)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rollout.engine=transformers"], r"needs rollout.engine=vllm \(the transformers engine"),
        (
            ["rollout.engine=vllm", "rollout.top_p=0.9"],
            r"needs rollout.top_p=1 \(at 0.9 the sampler's are of the nucleus",
        ),
        (
            ["rollout.engine=vllm", "rollout.importance_correction=true"],
            r"needs rollout.importance_correction=false \(it compares the two\)$",
        ),
    ],
)
def test_the_sampler_source_is_refused_where_it_cannot_be_logp_old(overrides, message) -> None:
    with pytest.raises(ConfigError, match=r": rollout.logp_old=sampler " + message):
        load_run_config(None, ["rollout.logp_old=sampler", *overrides])
