"""One batch of real vLLM rollouts through groupwise's trainer, run as a script in its own process
by tests/test_vllm_train.py (a vLLM engine in process changes torch's thread settings for good):

    python tests/vllm_train_check.py MODEL_DIR RUN_DIR OUT.json -- [key=value ...]

Builds the trainer of the overrides with rollout.engine=vllm, samples one step's rollouts with
vLLM, and learns on them three times from the same weights and optimizer state: with the
sampler's log-probs and the correction off, without them (what the transformers engine hands
the learner), and with the correction on. Writes each one's first-update metrics, whether the
updated weights of the first two are identical, the rollouts' facts, and the largest
difference of vLLM's log-probs to the trainer's on a rollout after the weight sync (the trained
weights) and on the first rollout under the trained weights (before it).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import sys

import torch


def main(argv: list[str]) -> None:
    model_dir, run_dir, out = argv[:3]
    overrides = argv[4:] if argv[3:4] == ["--"] else argv[3:]
    from vllm_trl_run import tiny_vllm_model

    from groupwise.algorithms import ImportanceCorrection
    from groupwise.train.learner import LearnSettings
    from groupwise.train.preflight import load_run_config
    from groupwise.train.trainer import Trainer

    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        tiny_vllm_model(model_dir)
    config = load_run_config(
        None,
        [f"model.name={model_dir}", f"train.output_dir={run_dir}", *overrides],
    )
    trainer = Trainer(config)
    problems = trainer.sampler.batch(0)
    questions = list(range(len(problems)))
    batch = trainer.batches.score(
        problems, questions, trainer.batches.rollout(problems, questions, trainer.batches.position)
    )
    weights = [p.detach().clone() for p in trainer.params]
    optimizer = copy.deepcopy(trainer.updater.optimizer.state_dict())
    scheduler = copy.deepcopy(trainer.updater.scheduler.state_dict())
    settings = trainer.learner.settings

    def learn(rollouts, cap: float | None) -> tuple[dict, list[torch.Tensor]]:
        with torch.no_grad():
            for p, w in zip(trainer.params, weights, strict=True):
                p.copy_(w)
        trainer.updater.optimizer.load_state_dict(copy.deepcopy(optimizer))
        trainer.updater.scheduler.load_state_dict(copy.deepcopy(scheduler))
        correction = None if cap is None else ImportanceCorrection(cap=cap)
        trainer.learner.settings = dataclasses.replace(settings, importance=correction)
        learned = trainer.learn(dataclasses.replace(batch, rollouts=rollouts))
        after = [p.detach().clone() for p in trainer.params]
        return {**learned.updates[0], **learned.sampler}, after

    assert isinstance(settings, LearnSettings)
    off, off_weights = learn(batch.rollouts, None)
    plain, plain_weights = learn(dataclasses.replace(batch.rollouts, sampler_logp=None), None)
    on, _ = learn(batch.rollouts, 3.0)
    rollouts = batch.rollouts
    # the updates moved the weights: the next rollout syncs them first, and vLLM's log-probs
    # are then the trained policy's (those of the rollouts before the sync are the initial's)
    fresh = trainer.batches.rollout(problems, questions, trainer.batches.position)
    mask = fresh.completion_mask.bool()
    with torch.no_grad():
        trained = trainer.passes.logprobs(fresh, slice(0, len(fresh)))
        stale = trainer.passes.logprobs(rollouts, slice(0, len(rollouts)))
    after_sync = float((trained - fresh.sampler_logp).abs()[mask].max())
    old_mask = rollouts.completion_mask.bool()
    before_sync = float((stale - rollouts.sampler_logp).abs()[old_mask].max())
    with open(out, "w") as handle:
        json.dump(
            {
                "off": off,
                "plain": plain,
                "on": on,
                "same_weights": all(
                    torch.equal(a, b) for a, b in zip(off_weights, plain_weights, strict=True)
                ),
                "moved": any(
                    not torch.equal(a, b) for a, b in zip(off_weights, weights, strict=True)
                ),
                "rows": len(rollouts),
                "tokens": int(rollouts.completion_mask.sum()),
                "sampler_logp_finite": bool(torch.isfinite(rollouts.sampler_logp).all()),
                "record": trainer.generator.record(),
                "after_sync": after_sync,
                "before_sync": before_sync,
            },
            handle,
        )
    trainer.close()


if __name__ == "__main__":
    main(sys.argv[1:])
