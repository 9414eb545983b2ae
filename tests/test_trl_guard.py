"""The guard on TRL's internals: GroupwiseGRPOTrainer overrides private GRPOTrainer methods and
reads keys of its batch dict. These tests fail, with a message naming what changed, when the
installed TRL no longer matches (compat.HOOKS, compat.BATCH_KEYS)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import trl_support as fx  # imports TRL: a CI dependency, so these tests never skip
from trl import GRPOTrainer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

from groupwise.integrations.trl import GroupwiseGRPOTrainer, TRLCompatibilityError
from groupwise.integrations.trl.compat import (
    ATTRIBUTES,
    BATCH_KEYS,
    HOOKS,
    check_trainer_attributes,
    check_trl_compatibility,
    require_batch_keys,
)


def test_installed_trl_has_the_hooks_the_adapter_overrides() -> None:
    check_trl_compatibility()  # raises TRLCompatibilityError naming each changed hook
    # HOOKS lists exactly the GRPOTrainer methods the subclass overrides
    overridden = {
        name
        for name, value in vars(GroupwiseGRPOTrainer).items()
        if callable(value) and hasattr(GRPOTrainer, name) and name != "__init__"
    }
    assert overridden == set(HOOKS)


def test_a_changed_signature_is_named_in_the_error() -> None:
    class Changed(GRPOTrainer):
        def _compute_loss(self, model, inputs, num_items_in_batch):
            raise NotImplementedError

    with pytest.raises(TRLCompatibilityError) as error:
        check_trl_compatibility(Changed)
    message = str(error.value)
    assert "_compute_loss has parameters (self, model, inputs, num_items_in_batch)" in message
    assert "expected (self, model, inputs)" in message
    assert "trl>=1.16,<1.17" in message


def test_a_missing_hook_is_named_in_the_error() -> None:
    class Gone(GRPOTrainer):
        _calculate_rewards = None

    with pytest.raises(TRLCompatibilityError, match="Gone._calculate_rewards is missing"):
        check_trl_compatibility(Gone)


class PlainTRL(fx.FixedCompletions, GRPOTrainer):
    """TRL's own GRPOTrainer on the fixed batch."""


def test_trls_batch_dict_holds_the_keys_the_adapter_reads(tmp_path: Path) -> None:
    trainer, _, _ = fx.trainer(tmp_path, cls=PlainTRL, args=fx.trl_config(tmp_path))
    check_trainer_attributes(trainer)
    assert all(hasattr(trainer, name) for name in ATTRIBUTES)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(
        [{"prompt": prompt} for prompt in fx.PROMPTS for _ in range(fx.G)]
    )
    require_batch_keys(batch)  # raises TRLCompatibilityError naming any missing key
    assert set(BATCH_KEYS) <= set(batch)
    # TRL's shuffle and split carry an extra per-row key in step with the rows
    batch["groupwise_coefficients"] = torch.arange(len(fx.COMPLETIONS), dtype=torch.float32)
    batch["row_of"] = torch.arange(len(fx.COMPLETIONS))
    for part in split_tensor_dict(shuffle_sequence_dict(batch), 2):
        torch.testing.assert_close(part["groupwise_coefficients"], part["row_of"].float())
        rows = part["row_of"].tolist()
        assert part["completion_ids"][:, 0].tolist() == [fx.COMPLETIONS[r][0] for r in rows]


def test_a_missing_batch_key_is_named_in_the_error() -> None:
    batch = {key: torch.zeros(1) for key in BATCH_KEYS if key != "completion_mask"}
    with pytest.raises(TRLCompatibilityError, match="without completion_mask"):
        require_batch_keys(batch)


def test_a_missing_attribute_is_named_in_the_error() -> None:
    with pytest.raises(TRLCompatibilityError, match="reward_func_names, reward_weights"):
        check_trainer_attributes(object())


def test_a_changed_generation_hook_of_the_callback_is_named() -> None:
    # PassAtKCallback calls _tokenize_prompts and _generate_single_turn (compat.CALLED_HOOKS)
    class Changed(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, images, num_generations):
            raise NotImplementedError

    with pytest.raises(TRLCompatibilityError, match="_generate_single_turn has parameters"):
        check_trl_compatibility(Changed)
