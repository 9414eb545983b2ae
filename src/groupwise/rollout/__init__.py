"""Rollout generation: the Generator protocol, its data types and the transformers engine; the
evaluation engines (Sampler protocol): vLLM in process and any OpenAI-compatible server."""

from groupwise.rollout.openai_engine import OpenAIEngine, ServerError
from groupwise.rollout.transformers_engine import (
    TransformersGenerator,
    sample_next_tokens,
    stop_token_ids,
    top_p_filter,
)
from groupwise.rollout.types import (
    ChatMessages,
    Completions,
    Generator,
    ModelInputs,
    Prompt,
    Rollouts,
    Sampler,
    SamplingParams,
    TokenScorer,
)
from groupwise.rollout.vllm_engine import VLLMEngine

__all__ = [
    "ChatMessages",
    "Completions",
    "Generator",
    "ModelInputs",
    "OpenAIEngine",
    "Prompt",
    "Rollouts",
    "Sampler",
    "SamplingParams",
    "ServerError",
    "TokenScorer",
    "TransformersGenerator",
    "VLLMEngine",
    "sample_next_tokens",
    "stop_token_ids",
    "top_p_filter",
]
