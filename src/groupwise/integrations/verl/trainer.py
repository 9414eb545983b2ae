"""groupwise's trainer mode for verl's v1 trainer (docs/guides/verl.md, "The trainer mode").

    trainer.v1.trainer_mode=groupwise algorithm.adv_estimator=groupwise_NAME

`GroupwiseTrainer` is verl's own `PPOTrainerSync` (colocated rollout, its checkpoints, its
validation, its loggers), and verl takes its sync paths with it: `main_ppo` finds the trainer by
the name `groupwise`, then the trainer sets `config.trainer.v1.trainer_mode` to "sync"
(`SYNC_MODE`) before verl's base class reads it, so that every reader of the mode, the trainer's
attribute and the config key alike, sees verl's sync mode. Three changes, in the order of verl's
step:

- before any worker starts, every groupwise option is checked (`check_config`: one line naming
  the key);
- `_compute_advantage` builds groupwise's group rewards from what verl's own method fetches
  (uid, response mask, scores, old log-probs; the reward's correctness key where one is named)
  and writes verl's advantages plus AMIR's per-row weights (`loss.COEFFICIENTS`, lambda folded
  in) back to TransferQueue, and groupwise's metrics into verl's metrics dict; with
  `algorithm.groupwise.mask_truncated`, the response and loss masks without the responses
  that fill rollout.response_length (DAPO's overlong filtering);
- with AMIR, the actor's loss is `loss.amir_ppo_loss` (verl's `ppo_loss` plus the AMIR term,
  the same gradient for any micro-batch split), set through the worker's `set_loss_fn`, and
  the adaptive lambda is updated on the driver after each actor update from verl's logged
  `actor/pg_loss` and the batch's L_pref, saved with verl's checkpoints (`groupwise.json`).

verl's own v1 trainers get one check at their start (`refusing_at_start` around verl's
PPOTrainer.__init__): a groupwise estimator whose options they cannot run (LENS, AMIR,
mask_truncated) is refused in one line before any worker starts, not at the first step. Every
v1 trainer of a groupwise estimator, the trainer mode's included, gets a second when it loads
the tokenizer (`checking_chat_template` around PPOTrainer._init_tokenizer, the first step of its
set-up, before any worker): a tokenizer without a chat template, which verl's dataset and agent
loop apply to every prompt, is refused in one line naming the model and verl's
`actor_rollout_ref.model.custom_chat_template` (without it verl drops every prompt, or its
rollout fails in a worker, and the run stops on an empty batch).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.protocol import DataProto
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.v1.trainer_base import PPOTrainer, register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.padding import response_to_nested

from groupwise.algorithms import ADVANTAGE_ESTIMATORS
from groupwise.integrations.verl.advantages import check_verl_trainer
from groupwise.integrations.verl.batch import batch_fields, observe_losses
from groupwise.integrations.verl.data import MESSAGE_TEXT_TEMPLATE
from groupwise.integrations.verl.loss import COEFFICIENTS, amir_ppo_loss
from groupwise.integrations.verl.options import (
    ESTIMATOR_PREFIX,
    build_algorithm,
    read_options,
    verl_name,
)

TRAINER_MODE = "groupwise"
"""verl's trainer.v1.trainer_mode that selects GroupwiseTrainer (main_ppo's get_trainer_cls)."""
SYNC_MODE = "sync"
"""The mode GroupwiseTrainer runs as, in its attribute and in the config key once it is built:
PPOTrainer compares `self.trainer_mode` with "sync" (replay buffer, refill rule, dataloader
batch, TransferQueue state in checkpoints, re-issued prompts) and reads `trainer.v1.<mode>`
settings, other verl code reads the config key, and any other name takes verl's async paths,
inside a trainer that is verl's PPOTrainerSync."""
STATE_FILE = "groupwise.json"
"""The file of groupwise's state (AMIR's lambda) in each verl checkpoint folder."""


def check_config(config: Any) -> str:
    """groupwise's estimator name of verl's full config, after every check the trainer mode
    needs (each a one-line ValueError naming the key): a groupwise estimator, no KL in the reward
    (it would change the scores the groups are built from), no distillation with AMIR, and every
    `algorithm.groupwise.*` option (AlgorithmOptions.build at G = rollout.n)."""
    estimator = str(config.algorithm.adv_estimator)
    name = estimator.removeprefix(ESTIMATOR_PREFIX)
    if not estimator.startswith(ESTIMATOR_PREFIX) or name not in ADVANTAGE_ESTIMATORS:
        known = ", ".join(ESTIMATOR_PREFIX + key for key in sorted(ADVANTAGE_ESTIMATORS))
        raise ValueError(
            f"trainer.v1.trainer_mode={TRAINER_MODE} needs algorithm.adv_estimator=groupwise_NAME "
            f"({known}); got {estimator}"
        )
    if config.algorithm.use_kl_in_reward:
        raise ValueError(
            f"algorithm.use_kl_in_reward=true: trainer.v1.trainer_mode={TRAINER_MODE} builds its "
            "groups from the reward's own scores; use actor_rollout_ref.actor.use_kl_loss for a KL "
            "term"
        )
    group_size = int(config.actor_rollout_ref.rollout.n)
    algorithm = build_algorithm(config.algorithm, name, group_size).algorithm
    distillation = config.get("distillation")
    if algorithm.pair_settings is not None and distillation and distillation.get("enabled"):
        raise ValueError(
            f"{verl_name('amir')}=true with distillation.enabled=true: the AMIR loss is verl's "
            "ppo_loss plus the AMIR term, not its distillation loss"
        )
    return name


@register_trainer(TRAINER_MODE)
class GroupwiseTrainer(PPOTrainerSync):
    """verl's PPOTrainerSync with groupwise's advantages, AMIR loss and metrics (module
    docstring)."""

    def __init__(self, config: Any) -> None:
        self.estimator = check_config(config)
        with open_dict(config):
            config.trainer.v1.trainer_mode = SYNC_MODE
        super().__init__(config)
        # this run's own, for every batch and the checkpoints: never rebuilt from the config
        self.built = build_algorithm(
            config.algorithm, self.estimator, int(config.actor_rollout_ref.rollout.n)
        )
        self.algorithm = self.built.algorithm
        self.correctness_key = read_options(config.algorithm, self.estimator)[1].correctness_key
        self._pref_loss: float | None = None
        self._observed = False

    @property
    def amir(self) -> bool:
        """Whether AMIR-GRPO's term is on."""
        return self.algorithm.pair_settings is not None

    def _setup(self) -> None:
        super()._setup()
        if self.amir:
            self.actor_rollout_wg.set_loss_fn(self.actor_loss())

    def actor_loss(self) -> functools.partial:
        """amir_ppo_loss bound to verl's ActorConfig of actor_rollout_ref.actor, as verl's worker
        binds its own ppo_loss (its clip ratios, loss_agg_mode, KL loss settings hold)."""
        actor = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        return functools.partial(amir_ppo_loss, config=actor)

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        fields = ["uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs"]
        if self.correctness_key is not None:
            fields.append("extra_fields")
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=fields
        )
        response_mask = data["response_mask"]
        extra = data.pop("extra_fields").tolist() if self.correctness_key is not None else None
        data = DataProto(batch=data.to_padded_tensor())
        uid = np.array(data.batch.pop("uid").tolist(), dtype=object)

        data, correction = self._rollout_correction(data, metrics)
        real = real_rows(batch)
        scores = data.batch["rm_scores"]
        mask = data.batch["response_mask"]
        truncated = None
        if self.built.verl.mask_truncated:
            truncated = mask.sum(dim=-1) >= self.config.actor_rollout_ref.rollout.response_length
        groupwise = batch_fields(
            self.built,
            scores[real],
            mask[real],
            uid[real.numpy()],
            data.batch["old_log_probs"][real],
            None if extra is None else correctness(extra, self.correctness_key, real),
            None if truncated is None else truncated[real],
        )
        metrics.update(groupwise.metrics)
        self._pref_loss, self._observed = groupwise.pref_loss, True

        advantages = torch.zeros_like(scores)
        advantages[real] = groupwise.advantages
        output = {
            "advantages": response_to_nested(advantages, response_mask),
            "returns": response_to_nested(advantages, response_mask),
        }
        if groupwise.weights is not None:
            weights = torch.zeros(len(batch), dtype=torch.float32)
            weights[real] = groupwise.weights
            output[COEFFICIENTS] = weights
        output.update(mask_fields(data, correction, truncated, response_mask))
        return tq.kv_batch_put(
            keys=batch.keys,
            partition_id=batch.partition_id,
            fields=TensorDict(output, batch_size=len(batch)),
        )

    def _rollout_correction(self, data: DataProto, metrics: dict) -> tuple[DataProto, bool]:
        """verl's rollout correction (IS weights, rejection) where verl's own _compute_advantage
        runs it: algorithm.rollout_correction set, rollout log-probs recorded, not bypass mode."""
        rollout_config = self.config.algorithm.get("rollout_correction", None)
        correction = (
            rollout_config is not None
            and "rollout_log_probs" in data.batch
            and not rollout_config.get("bypass_mode", False)
        )
        if correction:
            data, correction_metrics = compute_rollout_correction_and_add_to_batch(
                data, rollout_config
            )
            metrics.update(correction_metrics)
        return data, correction

    def _update_actor(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        batch = super()._update_actor(batch, metrics)
        if self.amir and self._observed:
            observe_losses(self.built, float(metrics["actor/pg_loss"]), self._pref_loss)
        return batch

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()
        if self.amir:
            folder = os.path.join(
                self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"
            )
            with open(os.path.join(folder, STATE_FILE), "w") as handle:
                json.dump({"lambda_reg": self.algorithm.lambda_reg.state_dict()}, handle)

    def _load_checkpoint(self) -> None:
        super()._load_checkpoint()
        if not self.amir or self.global_steps == 0:
            return
        path = os.path.join(resumed_folder(self.config.trainer, self.global_steps), STATE_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{path} is missing: the checkpoint was not written by trainer_mode="
                f"{TRAINER_MODE} with {verl_name('amir')}=true, so lambda_reg cannot be restored"
            )
        with open(path) as handle:
            self.algorithm.lambda_reg.load_state_dict(json.load(handle)["lambda_reg"])


def refusing_at_start(verl_init: Callable[..., None]) -> Callable[..., None]:
    """verl's PPOTrainer.__init__ that first runs `check_verl_trainer` for verl's own trainers
    (sync, colocate_async, separate_async: before any worker starts); GroupwiseTrainer has its
    own check_config."""

    @functools.wraps(verl_init)
    def init(self: PPOTrainer, config: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(self, GroupwiseTrainer):
            check_verl_trainer(config)
        verl_init(self, config, *args, **kwargs)

    return init


PPOTrainer.__init__ = refusing_at_start(PPOTrainer.__init__)

TEMPLATE_FREE_MODEL_TYPES = ("deepseek_v4",)
"""config.json model types that verl 0.9.1 prompts without a chat template (its DeepSeek-V4
encoder, verl.utils.tokenizer.deepseek)."""


def check_chat_template(model: Any, tokenizer: Any, processor: Any = None) -> None:
    """Refuse, in one line naming the model, a tokenizer (or the processor, for a multimodal
    model: what verl applies then) without a chat template: verl's dataset and agent loop apply
    one to every prompt. `model` is verl's `actor_rollout_ref.model` config; `tokenizer` and
    `processor` are what verl loaded from it (its `custom_chat_template` already set)."""
    applied, kind = (tokenizer, "tokenizer") if processor is None else (processor, "processor")
    if getattr(applied, "chat_template", None) or model_type(model) in TEMPLATE_FREE_MODEL_TYPES:
        return
    key = "tokenizer_path" if model.get("tokenizer_path") else "path"
    raise ValueError(
        f"actor_rollout_ref.model.{key}={model.get(key)}: its {kind} has no chat template "
        f"({kind}.chat_template is not set), which verl applies to every prompt; give one with "
        "actor_rollout_ref.model.custom_chat_template=TEMPLATE, e.g. "
        f"'{MESSAGE_TEXT_TEMPLATE}' (the message text alone: a model taught on the bare "
        'question, such as groupwise\'s arith-base; docs/guides/verl.md, "On a CPU")'
    )


def model_type(model: Any) -> str | None:
    """The config.json model type of verl's `actor_rollout_ref.model` config, or None where it
    cannot be read here."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(
            str(model.get("hf_config_path") or model.path),
            trust_remote_code=bool(model.get("trust_remote_code", False)),
        ).model_type
    except Exception:
        return None


def checking_chat_template(verl_init_tokenizer: Callable[..., None]) -> Callable[..., None]:
    """verl's PPOTrainer._init_tokenizer, then `check_chat_template` for a run of a groupwise
    estimator (any v1 trainer): the first step of the trainer's set-up, before any worker."""

    @functools.wraps(verl_init_tokenizer)
    def init_tokenizer(self: PPOTrainer, *args: Any, **kwargs: Any) -> None:
        verl_init_tokenizer(self, *args, **kwargs)
        if str(self.config.algorithm.adv_estimator).startswith(ESTIMATOR_PREFIX):
            check_chat_template(self.config.actor_rollout_ref.model, self.tokenizer, self.processor)

    return init_tokenizer


PPOTrainer._init_tokenizer = checking_chat_template(PPOTrainer._init_tokenizer)


def resumed_folder(trainer: Any, global_steps: int) -> str:
    """The checkpoint folder verl 0.9.1's PPOTrainer._load_checkpoint resumed `global_steps`
    from, by its own rule: `trainer.resume_from_path` under `resume_mode=resume_path`, else (auto:
    the latest) `trainer.default_local_dir`'s global_step_N; relative to the working folder."""
    if trainer.resume_mode == "resume_path":
        folder = str(trainer.resume_from_path)
    else:
        folder = os.path.join(str(trainer.default_local_dir), f"global_step_{global_steps}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def mask_fields(
    data: DataProto, correction: bool, truncated: torch.Tensor | None, layout: Any
) -> dict[str, Any]:
    """The masks to write back to TransferQueue, nested as `layout` (the response mask verl
    stored): verl's rollout correction's response mask and IS weights where it ran, and without
    the truncated rows' tokens ([B] bool, mask_truncated) in the response and loss masks."""
    output = {}
    mask = data.batch["response_mask"]
    if truncated is not None:
        mask = mask * ~truncated.unsqueeze(-1)
        # verl's actor counts a token-mean's tokens from the loss mask the agent loop wrote (a
        # copy of the response mask): the cut responses' tokens leave that count too, as they
        # leave groupwise's and TRL's
        output["loss_mask"] = response_to_nested(mask, layout)
    if correction or truncated is not None:
        output["response_mask"] = response_to_nested(mask, layout)
    if correction and "rollout_is_weights" in data.batch:
        output["rollout_is_weights"] = response_to_nested(data.batch["rollout_is_weights"], layout)
    return output


def real_rows(batch: KVBatchMeta) -> torch.Tensor:
    """[B] bool: the rows that are responses, not verl's padding rows (`is_padding` tags, added
    by `upsample_batch_to_divisible_size`; they get advantage 0 and AMIR weight 0). Refuses
    agent loops with several outputs per session, whose rows groupwise cannot group."""
    for key in batch.keys:
        if not key.endswith("_0"):
            raise ValueError(
                f"trainer.v1.trainer_mode={TRAINER_MODE} takes one output per session (single-"
                f"turn rollouts); got the key {key} (verl's {{uid}}_{{session}}_{{index}})"
            )
    return torch.tensor([not tag.get("is_padding", False) for tag in batch.tags], dtype=torch.bool)


def correctness(extra_fields: list[Any], key: str, real: torch.Tensor) -> torch.Tensor:
    """[R] bool of the real rows: each response's reward_extra_info[key] (true or > 0 is
    correct); a row without it is a one-line error naming algorithm.groupwise.correctness_key."""
    values = []
    for row, fields in enumerate(extra_fields):
        if not bool(real[row]):
            continue
        info = (fields or {}).get("reward_extra_info") or {}
        if key not in info:
            raise ValueError(
                f"{verl_name('correctness_key')}={key}: the reward's extra info of a response "
                f"has no such key (it has {sorted(info)})"
            )
        values.append(float(info[key]) > 0)
    return torch.tensor(values, dtype=torch.bool)
