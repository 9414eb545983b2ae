"""Training-time rollouts on vLLM (`rollout.engine: vllm`): a `Generator` like the
transformers engine, over one `vllm.LLM` in the training process (colocate).

- Weights: the engine starts from the policy's own source (groupwise.rollout.vllm_engine
  .vllm_model_source) and takes the policy's weights again before a `generate` whenever a
  trainable tensor changed since the last sync (torch's in-place version counters: an optimizer
  step, a resume). LoRA adapters are merged for the sync (W + (alpha / r) B A, peft's own
  get_delta_weight; the training weights are not touched); full fine-tuning sends the weights
  as they are. vLLM takes them through its in-place reload (`reload_weights`, the path the TRL
  adapter uses on vLLM's CPU build).
- Sampling: the trainer's SamplingParams (temperature, top-p, max tokens, stop strings) and one
  seed per prompt; completions end at the policy's EOS tokens (`stop_token_ids`) as the
  transformers engine's do, and are decoded by the policy's tokenizer.
- Log-probs: vLLM's log-probs of the sampled tokens after temperature and top-p
  (`logprobs_mode="processed_logprobs"`: the distribution it drew from) come back as
  `Rollouts.sampler_logp`. They measure the mismatch and feed the optional importance
  correction (groupwise.algorithms.importance); with `rollout.logp_old: sampler` (top_p 1) they
  are logp_old itself, in place of the trainer's own pass (docs/algorithms.md §1).
- Threads: the engine runs on this process's cores (groupwise.rollout.vllm_cpu, in process);
  `generate` may be called from another thread than the one that started the engine (sampling
  ahead of learning: groupwise.train.batch_source).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from groupwise.rollout.transformers_engine import stop_token_ids
from groupwise.rollout.types import Rollouts, SamplingParams
from groupwise.rollout.vllm_cpu import CpuBinding, reload_weights
from groupwise.rollout.vllm_engine import engine_arguments, start_llm

__all__ = ["VLLMGenerator", "merged_weights"]

TRAIN_FIXED_ARGS = {"logprobs_mode": "processed_logprobs"}


def merged_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights as its base model names them (a checkpoint's names), each LoRA
    layer's weight with its active adapters merged; LoRA's own tensors are left out. Tied
    weights come once (named_parameters)."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model() if isinstance(model, PeftModel) else model
    lora = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    with torch.no_grad():
        for name, tensor in base.named_parameters():
            if ".lora_" in name:
                continue
            layer_name, _, leaf = name.replace(".base_layer.", ".").rpartition(".")
            layer = lora.get(layer_name)
            value = tensor.detach()
            if layer is not None and leaf == "weight" and not layer.merged:
                deltas = [
                    layer.get_delta_weight(a).to(value.dtype)
                    for a in layer.active_adapters
                    if a in layer.lora_A
                ]
                value = value + sum(deltas) if deltas and not layer.disable_adapters else value
            yield f"{layer_name}.{leaf}", value


class VLLMGenerator:
    """Rollouts of `model` sampled by vLLM in this process (module docstring).

    model, tokenizer: the policy being trained. source: the model name vLLM loads first (the
    policy's model.name; its weights are the policy's until the first update). dtype: vLLM's
    weights dtype. seed: vLLM's global seed. memory: vLLM's gpu_memory_utilization. cpu_cores:
    on a CPU, the cores (None: this process's). engine_args: more vllm.LLM arguments.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        source: str,
        *,
        dtype: str = "float32",
        seed: int = 0,
        memory: float = 0.3,
        cpu_cores: Sequence[int] | None = None,
        engine_args: Mapping[str, Any] | None = None,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.eos_token_ids = stop_token_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.eos_token_ids[0])
        extra = {"gpu_memory_utilization": memory, **(engine_args or {})}
        args = engine_arguments(source, dtype, seed, extra, TRAIN_FIXED_ARGS)
        self.cpu_binding = CpuBinding.given(cpu_cores, in_process=True)
        saved = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process
        try:
            self.llm = start_llm(args, self.cpu_binding)
        finally:
            if saved is None:
                os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
            else:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = saved
        self._trainable = [p for p in model.parameters() if p.requires_grad]
        self._versions = self._current_versions()
        self._engine_thread = threading.get_ident()
        self.syncs, self.seconds_sync = 0, 0.0

    def _current_versions(self) -> list[int]:
        return [p._version for p in self._trainable]

    def sync(self, force: bool = False) -> bool:
        """Send the policy's weights to vLLM when a trainable tensor changed since the last
        sync (or `force`); returns whether it did."""
        versions = self._current_versions()
        if not force and versions == self._versions:
            return False
        start = time.perf_counter()
        reload_weights(self.llm, merged_weights(self.model))
        self._versions = versions
        self.syncs += 1
        self.seconds_sync += time.perf_counter() - start
        return True

    def generate(
        self,
        prompts: Sequence[str],
        n: int,
        sampling: SamplingParams,
        prompt_seeds: Sequence[int] | None = None,
        sync: bool = True,
    ) -> Rollouts:
        """n completions of each prompt, group-major, as Rollouts with sampler_logp; prompt i's
        from prompt_seeds[i] (else from sampling.seed and i). sync=False: with the weights the
        engine holds (a caller that samples while the policy trains synced them before)."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        if isinstance(prompts, str) or not prompts or n < 1:
            raise ValueError("prompts must be a non-empty list of strings and n >= 1")
        if prompt_seeds is None:
            first = sampling.seed if sampling.seed is not None else torch.seed() % 2**31
            prompt_seeds = [first * 1_000_003 + i for i in range(len(prompts))]
        if len(prompt_seeds) != len(prompts):
            raise ValueError(f"{len(prompt_seeds)} prompt_seeds for {len(prompts)} prompts")
        encoded = [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
        if any(not ids for ids in encoded):
            raise ValueError("a prompt encodes to no tokens; a prompt needs at least one")
        if threading.get_ident() != self._engine_thread:
            # OpenMP's thread count is per thread, and vLLM's CPU attention requires the count
            # its engine was set up with; vLLM stubs torch.set_num_threads out, not torch._C's
            torch._C.set_num_threads(len(self.cpu_binding.cores))
        if sync:
            self.sync()
        params = [
            VLLMSamplingParams(
                n=n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=int(seed) % 2**63,
                stop=list(sampling.stop) or None,
                stop_token_ids=self.eos_token_ids,
                logprobs=0,
            )
            for seed in prompt_seeds
        ]
        inputs = [TokensPrompt(prompt_token_ids=list(ids)) for ids in encoded]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        samples = [s for out in outputs for s in sorted(out.outputs, key=lambda o: o.index)]
        return self._assemble(encoded, samples, n)

    def _assemble(self, encoded: list[list[int]], samples: list[Any], n: int) -> Rollouts:
        """Rollouts of vLLM's samples: prompts left padded, completions right padded (the EOS
        that ended one included), the sampled tokens' log-probs beside them."""
        width = max(1, max(len(s.token_ids) for s in samples))
        ids = torch.full((len(samples), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(samples), width), dtype=torch.long)
        logp = torch.zeros((len(samples), width))
        for row, sample in enumerate(samples):
            tokens = list(sample.token_ids)
            ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            mask[row, : len(tokens)] = 1
            logp[row, : len(tokens)] = torch.tensor(
                [step[t].logprob for step, t in zip(sample.logprobs, tokens, strict=True)]
            )
        prompt_width = max(len(p) for p in encoded)
        prompt_ids = torch.full((len(encoded), prompt_width), self.pad_token_id)
        prompt_mask = torch.zeros((len(encoded), prompt_width), dtype=torch.long)
        for row, prompt in enumerate(encoded):
            prompt_ids[row, prompt_width - len(prompt) :] = torch.tensor(prompt)
            prompt_mask[row, prompt_width - len(prompt) :] = 1
        texts = self.tokenizer.batch_decode(
            [list(s.token_ids) for s in samples], skip_special_tokens=True
        )
        return Rollouts(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=ids,
            completion_mask=mask,
            texts=texts,
            truncated=torch.tensor([s.finish_reason == "length" for s in samples]),
            group_size=n,
            sampler_logp=logp,
        )

    def record(self) -> dict[str, Any]:
        """What a step logs of the engine: its cores, the weight syncs so far and their time."""
        return {
            "sampler_cores": self.cpu_binding.record()["cores"],
            "weight_syncs": self.syncs,
            "seconds_weight_sync_total": self.seconds_sync,
        }
