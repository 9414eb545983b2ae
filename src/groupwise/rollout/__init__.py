"""Rollout generation: the Generator protocol, its data types and the transformers engine."""

from groupwise.rollout.transformers_engine import (
    TransformersGenerator,
    sample_next_tokens,
    stop_token_ids,
    top_p_filter,
)
from groupwise.rollout.types import Generator, ModelInputs, Rollouts, SamplingParams

__all__ = [
    "Generator",
    "ModelInputs",
    "Rollouts",
    "SamplingParams",
    "TransformersGenerator",
    "sample_next_tokens",
    "stop_token_ids",
    "top_p_filter",
]
