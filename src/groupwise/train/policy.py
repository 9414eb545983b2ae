"""The policy being trained: loading it (LoRA, gradient checkpointing) and its forward passes
over a step's rows.

`load_trainable_policy` builds the model from the config's `model:` section. `PolicyLogprobs`
gives the per-token log-probs of whole groups of completions under the policy (with gradient,
for the loss) and under the reference policy (the adapter disabled, no gradient), at the
sampling temperature (docs/algorithms.md §1); each group's prompt runs through the model once
(groupwise.completion_logprobs).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from groupwise.completion_logprobs import completion_logprobs
from groupwise.models import LoraSettings, attach_lora, load_model, reference_policy
from groupwise.rollout import Rollouts
from groupwise.train.config import ModelConfig


def load_trainable_policy(
    settings: ModelConfig, device: str
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """The policy to train (LoRA attached when configured) in eval mode, and its tokenizer."""
    model, tokenizer = load_model(
        settings.name, dtype=settings.dtype, device=device, seed=settings.seed
    )
    if settings.lora:
        model = attach_lora(
            model,
            LoraSettings(
                r=settings.lora_r,
                alpha=settings.lora_alpha,
                dropout=settings.lora_dropout,
                target_modules=settings.lora_target_modules,
            ),
        )
    if settings.attention is not None:
        model.set_attn_implementation(settings.attention)
    # Dropout off (as TRL's disable_dropout): the log-probs of the loss must be those of the
    # policy that sampled, and logp_old is recorded from a training forward pass.
    model.eval()
    if settings.gradient_checkpointing:
        _enable_gradient_checkpointing(model, settings.lora)
    return model, tokenizer


class PolicyLogprobs:
    """Token log-probs of rows of a step's rollouts (whole groups) under the policy and under
    the reference policy: the policy's forward passes.

    model: the policy; device: where it runs; group_size: G; temperature: the sampling
    temperature the log-probs are taken at; reference: whether `reference` passes run (a KL
    term or AMIR with a reference, docs/algorithms.md §1-2); autocast: the dtype the passes run
    their matmuls in under torch.autocast (train.precision; None: the model's own)."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        group_size: int,
        temperature: float,
        reference: bool,
        autocast: torch.dtype | None = None,
    ) -> None:
        self.model, self.device, self.autocast = model, device, autocast
        self.group_size, self.temperature, self.needs_reference = group_size, temperature, reference

    def logprobs(self, rollouts: Rollouts, rows: slice, entropy: bool = False) -> Any:
        """Token log-probs [rows, T] (float32) of whole groups of completions under the policy
        (with gradient unless the caller disabled it); each group's prompt runs once. With
        `entropy`: (log-probs, per-token entropies [rows, T]) from the same pass
        (docs/algorithms.md, "Entropy controls")."""
        prompts = slice(rows.start // self.group_size, rows.stop // self.group_size)
        mixed = self.autocast is not None
        with torch.autocast(self.device.type, dtype=self.autocast, enabled=mixed):
            return completion_logprobs(
                self.model,
                rollouts.prompt_ids[prompts].to(self.device),
                rollouts.prompt_mask[prompts].to(self.device),
                rollouts.completion_ids[rows].to(self.device),
                rollouts.completion_mask[rows].to(self.device),
                temperature=self.temperature,
                group_size=self.group_size,
                entropy=entropy,
            )

    def reference(self, rollouts: Rollouts, rows: slice) -> torch.Tensor | None:
        """Token log-probs [rows, T] under the reference policy (the adapter disabled), when a
        reference is needed; None otherwise."""
        if not self.needs_reference:
            return None
        with torch.no_grad(), reference_policy(self.model):
            return self.logprobs(rollouts, rows)


def _enable_gradient_checkpointing(model: torch.nn.Module, lora: bool) -> None:
    """Recompute activations in the backward pass, in train mode with dropout at 0."""
    # transformers >= 5.24 names it activation_checkpointing_enable (the old name warns)
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)()
    if lora:
        model.enable_input_require_grads()
    # transformers checkpoints layers only in training mode: train mode, dropout at 0.
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.train()
