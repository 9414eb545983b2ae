"""What verl's update of each step consumed, saved beside verl's own rollout dump.

With `trainer.rollout_data_dir` set, verl's v1 trainer dumps each step's generations there
(`_log_rollout_data`: texts and scores, before it clears the batch from TransferQueue). Wrapped
here, that dump also saves `batch_<step>.pt`: the batch's keys and tags, and from TransferQueue
its uid, prompts, responses (and each one's length: TransferQueue holds them nested),
rm_scores, response_mask (the loss's), old_log_probs, the rollout's log-probs, advantages and
(with AMIR) the AMIR weights, as the actor update read them. A test reads it to check the advantages
against groupwise's own `Algorithm.targets` on the same rows. Observation only: nothing verl
computes changes.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import transfer_queue as tq
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from groupwise.integrations.verl.loss import COEFFICIENTS

FIELDS = [
    "prompts",
    "responses",
    "rm_scores",
    "response_mask",
    "old_log_probs",
    "rollout_log_probs",
    "advantages",
]
verl_dump = PPOTrainer._log_rollout_data


@functools.wraps(verl_dump)
def dump_with_batch(self: PPOTrainer, batch: Any, timing_raw: dict, rollout_data_dir: str) -> None:
    verl_dump(self, batch, timing_raw, rollout_data_dir)
    amir = getattr(self, "amir", False)  # GroupwiseTrainer with AMIR wrote the weights
    fields = [*FIELDS, "uid"] + ([COEFFICIENTS] if amir else [])
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    uid = data.pop("uid").tolist()
    weights = data.pop(COEFFICIENTS) if amir else None
    lengths = [row.shape[0] for row in data["responses"].unbind()]
    record = {name: tensor for name, tensor in data.to_padded_tensor().items()}
    record.update(
        keys=list(batch.keys), tags=list(batch.tags), uid=uid, weights=weights, lengths=lengths
    )
    torch.save(record, os.path.join(rollout_data_dir, f"batch_{self.global_steps}.pt"))


PPOTrainer._log_rollout_data = dump_with_batch
