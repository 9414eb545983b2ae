"""What the TRL adapter relies on in TRL's GRPOTrainer, checked with clear errors.

GroupwiseGRPOTrainer overrides or calls private methods of TRL 1.16's GRPOTrainer and reads
keys of the batch dict `_generate_and_score_completions` returns. Private APIs change without
notice between TRL releases; when one does, `check_trl_compatibility` (run when a
GroupwiseGRPOTrainer is built) and `require_batch_keys` (run on every generation batch) stop
with a message naming what changed, instead of training on silently wrong numbers.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any

SUPPORTED_TRL = ">=1.16,<1.17"
"""The TRL versions this adapter was written and tested against (the `trl` extra's pin)."""

FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)
"""Inputs of the policy's forward besides ids and mask, as GRPOTrainer._compute_loss passes them
to _get_per_token_logps_and_entropies (keyword parameters of that hook)."""

HOOKS: dict[str, tuple[str, ...]] = {
    # overridden: keeps the gathered per-function rewards (all processes' rows)
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
    # overridden: adds LENS advantages and AMIR coefficients to the batch dict
    "_generate_and_score_completions": ("self", "inputs"),
    # overridden (captures the policy's log-probs of the loss) and called (no-grad passes);
    # the first four parameters are positional, batch_size and the multimodal ones keywords
    "_get_per_token_logps_and_entropies": (
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
        "compute_aux_loss",
        *FORWARD_KEYS,
    ),
    # wrapped: the AMIR term is added to the loss it returns
    "_compute_loss": ("self", "model", "inputs"),
    # extended: the adaptive lambda is saved with / restored from each checkpoint
    "_save_checkpoint": ("self", "model", "trial"),
    "_load_optimizer_and_scheduler": ("self", "checkpoint"),
}
"""GRPOTrainer methods the adapter overrides or calls, with their parameter names in order."""

CALLED_HOOKS: dict[str, tuple[str, ...]] = {
    # PassAtKCallback samples the held-out problems through TRL's own generation path
    "_tokenize_prompts": ("self", "prompts"),
    "_generate_single_turn": (
        "self",
        "prompt_ids",
        "images",
        "multimodal_fields",
        "num_generations",
        "has_tool_images",
    ),
}
"""GRPOTrainer methods groupwise calls without overriding them (PassAtKCallback)."""

ATTRIBUTES = (
    "reward_func_names",
    "reward_weights",
    "num_generations",
    "scale_rewards",
    "multi_objective_aggregation",
    "beta",
    "_metrics",
    "_logs",
    "eos_token_ids",
)
"""Instance attributes of GRPOTrainer the adapter reads after GRPOTrainer.__init__."""

BATCH_KEYS = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "advantages",
    "num_items_in_batch",
)
"""Keys every batch dict of `_generate_and_score_completions` must hold. Read when present:
old_per_token_logps, sampling_per_token_logps, ref_per_token_logps, tool_mask and the
multimodal inputs (pixel_values, ...)."""


class TRLCompatibilityError(RuntimeError):
    """The installed TRL's GRPOTrainer no longer matches what the adapter relies on."""


def _hook_problems(trainer_class: type) -> list[str]:
    problems = []
    for name, expected in {**HOOKS, **CALLED_HOOKS}.items():
        method = getattr(trainer_class, name, None)
        if method is None:
            problems.append(f"{trainer_class.__name__}.{name} is missing")
            continue
        found = tuple(inspect.signature(inspect.unwrap(method)).parameters)
        if found != expected:
            problems.append(
                f"{trainer_class.__name__}.{name} has parameters ({', '.join(found)}); "
                f"expected ({', '.join(expected)})"
            )
    return problems


def check_trl_compatibility(trainer_class: type | None = None) -> None:
    """Raise TRLCompatibilityError naming every private GRPOTrainer method whose signature is
    not the one the adapter was written against (HOOKS, CALLED_HOOKS); warn when the installed
    TRL is outside SUPPORTED_TRL but its hooks still match.

    Args:
        trainer_class: the class to check; default trl.GRPOTrainer.
    """
    import trl
    from packaging.specifiers import SpecifierSet

    if trainer_class is None:
        trainer_class = trl.GRPOTrainer
    problems = _hook_problems(trainer_class)
    if problems:
        raise TRLCompatibilityError(
            f"groupwise.integrations.trl was written for TRL {SUPPORTED_TRL}; the installed TRL "
            f"{trl.__version__} changed the GRPOTrainer internals it relies on:\n  - "
            + "\n  - ".join(problems)
            + f'\nInstall a supported TRL: pip install "trl{SUPPORTED_TRL}"'
        )
    if trl.__version__ not in SpecifierSet(SUPPORTED_TRL, prereleases=True):
        warnings.warn(
            f"groupwise.integrations.trl is tested with TRL {SUPPORTED_TRL}, found "
            f"{trl.__version__}; its hooks still match, but check the training metrics",
            stacklevel=2,
        )


def check_trainer_attributes(trainer: Any) -> None:
    """Raise TRLCompatibilityError naming the GRPOTrainer attributes (ATTRIBUTES) a built
    trainer lacks."""
    missing = [name for name in ATTRIBUTES if not hasattr(trainer, name)]
    if missing:
        raise TRLCompatibilityError(
            f"TRL's GRPOTrainer no longer sets {', '.join(missing)}, which "
            f"groupwise.integrations.trl reads; install a supported TRL: "
            f'pip install "trl{SUPPORTED_TRL}"'
        )


def require_batch_keys(batch: Mapping[str, Any]) -> None:
    """Raise TRLCompatibilityError naming the BATCH_KEYS missing from a batch dict returned by
    GRPOTrainer._generate_and_score_completions."""
    missing = [key for key in BATCH_KEYS if key not in batch]
    if missing:
        raise TRLCompatibilityError(
            f"TRL's GRPOTrainer._generate_and_score_completions returned a batch without "
            f"{', '.join(missing)} (keys found: {', '.join(sorted(batch))}); "
            "groupwise.integrations.trl needs them. Install a supported TRL: "
            f'pip install "trl{SUPPORTED_TRL}"'
        )
