"""The engines of `groupwise eval` (EvalConfig.engine), opened from an evaluation's settings:
each is a `Sampler` (groupwise.rollout.types) with the function that renders a problem's
prompt the way that engine takes it.

- transformers: groupwise's own decode loop (TransformersGenerator) and, for mean_logp, a
  forward pass at temperature 1 (groupwise.completion_logprobs), joined by `RolloutSampler`.
- vllm: vLLM in process (groupwise.rollout.vllm_engine); prompts rendered with its tokenizer.
- openai: an OpenAI-compatible server (groupwise.rollout.openai_engine): chat messages for the
  chat endpoint (the server renders its template), prompt strings rendered with `tokenizer`
  for the completions endpoint. The server is checked (reachable, serving the model, sampling)
  before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from groupwise.evaluation.config import EvalConfig

if TYPE_CHECKING:
    import torch

    from groupwise.data import Problem
    from groupwise.rollout import Completions, Generator, Prompt, Rollouts, Sampler, SamplingParams

PromptFn = Callable[["Problem"], "Prompt"]


class RolloutSampler:
    """A Generator (token ids, the transformers engine) as a Sampler: its Rollouts as
    Completions, with mean_logp from `logp_fn` (float [N*n], NaN for none; None: not
    computed)."""

    def __init__(
        self, generator: Generator, logp_fn: Callable[[Rollouts], torch.Tensor] | None = None
    ) -> None:
        self.generator, self.logp_fn = generator, logp_fn

    def sample(
        self,
        prompts: Sequence[Prompt],
        n: int,
        sampling: SamplingParams,
        prompt_seeds: Sequence[int],
    ) -> Completions:
        from groupwise.rollout import Completions

        if any(not isinstance(p, str) for p in prompts):
            raise ValueError("the transformers engine takes prompt strings, not chat messages")
        rollouts = self.generator.generate(
            list(prompts),
            n,
            sampling,  # type: ignore[arg-type]
            prompt_seeds=prompt_seeds,
        )
        means: list[float | None] = [None] * len(rollouts)
        if self.logp_fn is not None:
            means = [float(v) for v in self.logp_fn(rollouts).tolist()]
        return Completions(
            list(rollouts.texts),
            rollouts.completion_lengths.tolist(),
            rollouts.truncated.tolist(),
            means,
            rollouts.group_size,
        )


@dataclass(frozen=True)
class EngineOptions:
    """How an engine runs, beside the settings that make its samples (EvalConfig).

    device, logp_batch_size: the transformers engine's device and sequences per scoring pass.
    api_key: the openai engine's Bearer token (None: none sent); concurrency, retries, timeout
        (seconds per request): see groupwise.rollout.OpenAIEngine.
    vllm_args: more vllm.LLM arguments for the vllm engine (tensor_parallel_size, ...).
    progress: the engine's own progress output (vLLM's bars).
    """

    device: str = "cpu"
    logp_batch_size: int = 8
    api_key: str | None = None
    concurrency: int = 16
    retries: int = 5
    timeout: float = 600.0
    vllm_args: Mapping[str, Any] = field(default_factory=dict)
    progress: bool = False


def load_tokenizer(name: str, seed: int = 0) -> Any:
    """The tokenizer of a groupwise model name: a folder or hub id (AutoTokenizer), or a shipped
    alias (loaded with its model). It decodes without the clean-up of spaces, as
    `groupwise.models.load_model`'s."""
    from groupwise.models import load_model, model_aliases

    if name in model_aliases():
        return load_model(name, seed=seed)[1]
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, clean_up_tokenization_spaces=False)
    except OSError as err:
        raise ValueError(f"cannot load the tokenizer {name!r} ({err})") from None


def _transformers(config: EvalConfig, options: EngineOptions) -> tuple[Sampler, PromptFn]:
    from functools import partial

    from groupwise.completion_logprobs import rollout_mean_logp
    from groupwise.data.prompts import render_prompt
    from groupwise.models import load_policy
    from groupwise.rollout import TransformersGenerator

    model, tokenizer = load_policy(
        config.model, config.adapter, dtype=config.dtype, device=options.device, seed=config.seed
    )
    generator = TransformersGenerator(model, tokenizer, batch_size=config.batch_size)
    sampler = RolloutSampler(
        generator, partial(rollout_mean_logp, model, batch_size=options.logp_batch_size)
    )
    return sampler, lambda problem: render_prompt(problem, config.prompt, tokenizer)


def _vllm(config: EvalConfig, options: EngineOptions) -> tuple[Sampler, PromptFn]:
    from groupwise.data.prompts import render_prompt
    from groupwise.rollout import VLLMEngine

    engine = VLLMEngine(
        config.model,
        adapter=config.adapter,
        dtype=config.dtype,
        seed=config.seed,
        engine_args=options.vllm_args,
        progress=options.progress,
    )
    return engine, lambda problem: render_prompt(problem, config.prompt, engine.tokenizer)


def _openai(config: EvalConfig, options: EngineOptions) -> tuple[Sampler, PromptFn]:
    from groupwise.data.prompts import build_messages, render_prompt
    from groupwise.rollout import OpenAIEngine, ServerError
    from groupwise.rollout.openai_engine import ModelNotServed

    assert config.base_url is not None and config.api is not None
    engine = OpenAIEngine(
        config.base_url,
        config.model,
        api=config.api,
        api_key=options.api_key,
        concurrency=options.concurrency,
        retries=options.retries,
        timeout=options.timeout,
    )
    tokenizer = load_tokenizer(config.tokenizer, config.seed) if config.tokenizer else None
    try:
        engine.check()
    except ModelNotServed as err:
        raise ModelNotServed(f"--model: {err} (the served model's name)") from None
    except ServerError as err:
        raise ServerError(f"--base-url: {err}", status=err.status) from None
    if config.api == "chat":
        return engine, lambda problem: build_messages(problem, config.prompt)
    return engine, lambda problem: render_prompt(problem, config.prompt, tokenizer)


ENGINE_OPENERS = {"transformers": _transformers, "vllm": _vllm, "openai": _openai}


def open_sampler(config: EvalConfig, options: EngineOptions) -> tuple[Sampler, PromptFn]:
    """The engine of `config` (loaded, or its server checked) and its prompt function.
    ImportError when vLLM is missing; groupwise.rollout.ServerError when the server cannot be
    used; both with one-line messages."""
    return ENGINE_OPENERS[config.engine](config, options)
