"""Rollout engine on a transformers causal LM (CPU or GPU, plain or peft model).

Each chunk of prompts is encoded once and prefilled once; its KV cache is then repeated n
times along the batch (row i*n + j is sample j of prompt i) and the n samples are decoded
step by step with temperature / top-p, each row stopping at its first EOS token. Sharing the
prefill saves (n - 1) prompt passes per prompt compared with `model.generate(
num_return_sequences=n)`, which prefills every copy; rows that finished are dropped from the
batch once they make up a quarter of it, so a few long completions do not drag the short
ones along. The KV cache of every full-attention layer is written into buffers with room for the
whole completion, so a decode step appends in place instead of copying the layer's whole cache
(transformers' DynamicCache concatenates: on a CPU, about a tenth of a step's memory traffic).

Inference copy (optional, what the trainer uses): decoding runs on a plain copy of the policy
with its LoRA adapters merged into the weights, optionally in another dtype (bfloat16 on CPUs
with avx512_bf16 or on GPUs). Every decoded token then costs one matmul per linear layer
instead of three plus the adapter's elementwise work, and bfloat16 halves the weight traffic
of the memory-bound decode steps. The copy follows the policy: before each `generate` call, the
weights whose tensors changed since the last refresh (torch's in-place version counters: an
optimizer step bumps them) are merged and copied again, so it can never sample from stale
weights. The training weights are never touched (no merge / unmerge round trip whose rounding
would drift them).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from groupwise.errors import NonFiniteError
from groupwise.models import cache_kwarg
from groupwise.rollout.types import Rollouts, SamplingParams

__all__ = [
    "InferenceCopy",
    "TransformersGenerator",
    "sample_next_tokens",
    "stop_token_ids",
    "top_p_filter",
]


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter: keep, per row, the smallest set of most probable tokens whose probability
    reaches top_p (a token is kept when the tokens ranked above it hold less than top_p); the
    rest get -inf. logits: Tensor[..., V]; returns a new tensor of the same shape. The most
    probable token is always kept; top_p = 1 keeps everything."""
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_p == 1.0:
        return logits.clone()
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.float().softmax(dim=-1)
    mass_above = probs.cumsum(dim=-1) - probs
    remove_sorted = mass_above >= top_p
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def stop_token_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every token id that ends a completion: the tokenizer's EOS and the model's
    generation_config eos_token_id (an int or a list), deduplicated and sorted."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos is not None:
        ids.update(int(i) for i in config_eos)
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation_config names an EOS")
    return sorted(ids)


class TransformersGenerator:
    """Sample n completions per prompt with a transformers causal LM (see the module docstring).

    model: a causal LM or a peft model around one; it is put in eval mode for generation and
        back in train mode afterwards if it was training.
    tokenizer: encodes the prompts as they are (no special tokens added unless
        add_special_tokens: chat templates already hold them) and decodes the completions.
    batch_size: completion rows decoded together; a chunk holds max(1, batch_size // n)
        prompts, so a whole group always shares one batch (at least n rows).
    eos_token_ids: ids that end a completion; default `stop_token_ids(model, tokenizer)`.
    progress: show a tqdm bar (rows done, tokens/s), for long evaluation runs.
    inference_copy: decode with a copy of `model` whose LoRA adapters are merged into its
        weights, in `dtype` (module docstring). Costs one more copy of the weights in `dtype`.
        A model without adapters is copied only when `dtype` differs from its own.
    dtype: dtype of the inference copy; None keeps the model's.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        batch_size: int = 64,
        *,
        eos_token_ids: Sequence[int] | None = None,
        add_special_tokens: bool = False,
        progress: bool = False,
        inference_copy: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.eos_token_ids = (
            list(eos_token_ids) if eos_token_ids is not None else stop_token_ids(model, tokenizer)
        )
        pad = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        )
        self.pad_token_id = int(pad)
        self.add_special_tokens = add_special_tokens
        self.progress = progress
        self._copy = InferenceCopy(model, dtype) if inference_copy else None
        if self._copy is not None and self._copy.model is model:
            self._copy = None  # nothing to merge or cast: decode with the model itself
        self._cache_kwarg = cache_kwarg(model)

    @property
    def decoder_model(self) -> torch.nn.Module:
        """The model that decodes: the inference copy when there is one, else `model`."""
        return self.model if self._copy is None else self._copy.model

    def generate(
        self,
        prompts: Sequence[str],
        n: int,
        sampling: SamplingParams,
        prompt_seeds: Sequence[int] | None = None,
    ) -> Rollouts:
        """n completions for each prompt, group-major, as Rollouts.

        Each prompt's samples draw from their own random stream, seeded by prompt_seeds[i]
        when given, else by sampling.seed and the prompt's index (a fresh seed when
        sampling.seed is None). A prompt's completions therefore do not depend on which other
        prompts share the call or the batch: what lets several training processes, each with
        its own questions, sample exactly what one process would (up to float rounding).
        """
        if isinstance(prompts, str) or not prompts:
            raise ValueError("prompts must be a non-empty list of strings")
        if n < 1:
            raise ValueError(f"n (samples per prompt) must be >= 1, got {n}")
        if prompt_seeds is not None and len(prompt_seeds) != len(prompts):
            raise ValueError(f"{len(prompt_seeds)} prompt_seeds for {len(prompts)} prompts")
        if sampling.stop:
            raise ValueError(
                "the transformers engine stops at EOS tokens only, not at stop strings "
                f"{list(sampling.stop)}; the vllm and openai engines take them"
            )
        encoded = self.tokenizer(
            list(prompts), add_special_tokens=self.add_special_tokens, padding=False
        )["input_ids"]
        empty = [i for i, ids in enumerate(encoded) if not ids]
        if empty:
            raise ValueError(
                f"prompts {empty[:5]} encode to no tokens; a prompt needs at least one"
            )
        if self._copy is not None:
            self._copy.refresh()
        device = next(self.model.parameters()).device
        if prompt_seeds is None:
            first_seed = torch.Generator().seed() if sampling.seed is None else sampling.seed
            prompt_seeds = [(first_seed * 1_000_003 + i) % 2**63 for i in range(len(prompts))]
        streams = [torch.Generator(device=device).manual_seed(int(s)) for s in prompt_seeds]

        per_chunk = max(1, self.batch_size // n)
        chunks: list[tuple[torch.Tensor, torch.Tensor]] = []
        was_training = self.model.training
        self.model.eval()
        bar = tqdm(total=len(encoded) * n, desc="generate", unit="seq", disable=not self.progress)
        start, new_tokens = time.perf_counter(), 0
        try:
            with torch.inference_mode():
                for first in range(0, len(encoded), per_chunk):
                    ids, mask = _left_pad(encoded[first : first + per_chunk], self.pad_token_id)
                    tokens, lengths = self._sample(
                        ids.to(device),
                        mask.to(device),
                        n,
                        sampling,
                        streams[first : first + per_chunk],
                    )
                    chunks.append((tokens.cpu(), lengths.cpu()))
                    new_tokens += int(lengths.sum())
                    bar.update(tokens.shape[0])
                    bar.set_postfix(tok_per_s=f"{new_tokens / (time.perf_counter() - start):.0f}")
        finally:
            bar.close()
            if was_training:
                self.model.train()
        return self._assemble(encoded, chunks, n, sampling.max_new_tokens)

    def _sample(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        n: int,
        sampling: SamplingParams,
        streams: Sequence[torch.Generator],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode n samples for each prompt of one chunk, prompt i's from streams[i].

        Returns tokens LongTensor[B*n, max_new_tokens] (pad after a row's end) and lengths
        LongTensor[B*n] (tokens generated, EOS included; -1 where no EOS came: truncated).
        """
        model = self.decoder_model
        positions = (prompt_mask.cumsum(dim=1) - 1).clamp(min=0)
        # The model fills this cache in place; holding it ourselves spares reading it back from
        # an output field whose name changed across transformers versions.
        cache = DynamicCache(config=model.config)
        cache.layers = [
            _PreallocatedLayer(sampling.max_new_tokens) if type(layer) is DynamicLayer else layer
            for layer in cache.layers
        ]
        out = model(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kwarg: cache},
        )
        cache.batch_repeat_interleave(n)
        logits = out.logits[:, -1].float().repeat_interleave(n, dim=0)
        attention_mask = prompt_mask.repeat_interleave(n, dim=0)
        position = positions[:, -1].repeat_interleave(n, dim=0)

        rows = logits.shape[0]
        device = logits.device
        eos = torch.tensor(self.eos_token_ids, dtype=torch.long, device=device)
        tokens = torch.full((rows, sampling.max_new_tokens), self.pad_token_id, device=device)
        lengths = torch.full((rows,), -1, device=device)
        row_of = torch.arange(rows, device=device)  # batch entry -> output row
        live = torch.ones(rows, dtype=torch.bool, device=device)
        for step in range(sampling.max_new_tokens):
            # n draws per prompt and step, whether its rows are still live or not, so a
            # stream's draws never depend on the other prompts of the batch.
            uniform = torch.cat(
                [torch.rand(n, generator=g, dtype=torch.float64, device=device) for g in streams]
            )[row_of]
            try:
                token = sample_next_tokens(logits, sampling, uniform=uniform)
            except NonFiniteError as error:
                where = f"{error.what} at completion token {step + 1}"
                raise NonFiniteError(where, hint=error.hint) from None
            token = torch.where(live, token, self.pad_token_id)
            tokens[row_of, step] = token
            stopped = live & torch.isin(token, eos)
            lengths[row_of[stopped]] = step + 1
            live &= ~stopped
            if step + 1 == sampling.max_new_tokens or not bool(live.any()):
                break
            # Finished rows ride along (their tokens are discarded) until they are a quarter of
            # the batch: dropping them costs a copy of the cache, so it is done rarely.
            if 4 * int((~live).sum()) >= live.numel():
                keep = live.nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                row_of, live, token = row_of[keep], live[keep], token[keep]
                attention_mask, position = attention_mask[keep], position[keep]
            attention_mask = torch.cat(
                [attention_mask, attention_mask.new_ones(live.numel(), 1)], 1
            )
            position = position + 1
            out = model(
                input_ids=token[:, None],
                attention_mask=attention_mask,
                position_ids=position[:, None],
                use_cache=True,
                **{self._cache_kwarg: cache},
            )
            logits = out.logits[:, -1].float()
        return tokens, lengths

    def _assemble(
        self,
        encoded: list[list[int]],
        chunks: list[tuple[torch.Tensor, torch.Tensor]],
        n: int,
        max_new_tokens: int,
    ) -> Rollouts:
        prompt_ids, prompt_mask = _left_pad(encoded, self.pad_token_id)
        lengths = torch.cat([chunk_lengths for _, chunk_lengths in chunks])
        truncated = lengths < 0
        lengths = torch.where(truncated, max_new_tokens, lengths)
        width = int(lengths.max())
        completion_ids = torch.cat([tokens[:, :width] for tokens, _ in chunks])
        completion_mask = (torch.arange(width) < lengths[:, None]).long()
        completion_ids = completion_ids.masked_fill(completion_mask == 0, self.pad_token_id)
        texts = self.tokenizer.batch_decode(
            [row[:length].tolist() for row, length in zip(completion_ids, lengths, strict=True)],
            skip_special_tokens=True,
        )
        return Rollouts(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=completion_ids,
            completion_mask=completion_mask,
            texts=texts,
            truncated=truncated,
            group_size=n,
        )


class InferenceCopy:
    """A plain (adapter-free) copy of `source` for decoding, LoRA merged in, weights in `dtype`.

    `refresh()` brings it up to date with `source`: every copied tensor whose sources changed
    since the last refresh (per-tensor in-place version counters) is recomputed, a LoRA layer as
    W + (alpha / r) B A of its active adapters (peft's own get_delta_weight), anything else
    copied and cast. With LoRA only the adapters train, so a refresh after an optimizer step
    costs one small B @ A product per adapted layer and one cast-copy of its weight.
    """

    def __init__(self, source: torch.nn.Module, dtype: torch.dtype | None = None) -> None:
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer

        self.source = source
        base = source.get_base_model() if isinstance(source, PeftModel) else source
        owned = next(base.parameters()).dtype
        if base is source and dtype in (None, owned):
            self.model = source
            self._entries: list[tuple[torch.Tensor, tuple[torch.Tensor, ...], object]] = []
            return
        lora_layers = {n: m for n, m in base.named_modules() if isinstance(m, LoraLayer)}
        if isinstance(source, PeftModel) and not lora_layers:
            raise ValueError("inference_copy merges LoRA adapters; this peft model has none")
        for name, layer in lora_layers.items():
            if any(layer.use_dora.get(a, False) for a in layer.active_adapters):
                raise ValueError(f"inference_copy does not merge DoRA adapters ({name})")
        # Built once by peft's own merge (module tree, buffers, tied weights as the base has
        # them); refreshes after that only recompute what changed.
        merged = copy.deepcopy(source)
        if isinstance(merged, PeftModel):
            merged = merged.merge_and_unload()
        self.model = merged.to(dtype or owned).eval().requires_grad_(False)

        targets = dict(self.model.named_parameters(remove_duplicate=False))
        targets.update(self.model.named_buffers(remove_duplicate=False))
        self._entries = []
        for name, tensor in [
            *base.named_parameters(remove_duplicate=False),
            *base.named_buffers(remove_duplicate=False),
        ]:
            if ".lora_" in name:
                continue  # part of a LoRA layer's merged weight below
            layer_name, _, leaf = name.replace(".base_layer.", ".").rpartition(".")
            target = targets[f"{layer_name}.{leaf}"]
            layer = lora_layers.get(layer_name)
            if layer is not None and leaf == "weight":
                adapters = [
                    t
                    for a in layer.active_adapters
                    if a in layer.lora_A
                    for t in (layer.lora_A[a].weight, layer.lora_B[a].weight)
                ]
                self._entries.append((target, (tensor, *adapters), layer))
            else:
                self._entries.append((target, (tensor,), None))
        self._versions = [self._version(sources) for _, sources, _ in self._entries]

    @staticmethod
    def _version(sources: tuple[torch.Tensor, ...]) -> tuple[int, ...]:
        return tuple(t._version for t in sources)

    @torch.no_grad()
    def refresh(self) -> int:
        """Recompute the copied tensors whose sources changed; returns how many were."""
        changed = 0
        for k, (target, sources, layer) in enumerate(self._entries):
            version = self._version(sources)
            if version == self._versions[k]:
                continue
            value = sources[0]
            if layer is not None and not layer.merged and not layer.disable_adapters:
                value = value + sum(
                    layer.get_delta_weight(a).to(value.dtype)
                    for a in layer.active_adapters
                    if a in layer.lora_A
                )
            target.copy_(value)
            self._versions[k] = version
            changed += 1
        return changed


class _PreallocatedLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are views into buffers sized, at the first update
    (the prompt), for the prompt plus `reserve` more positions: `update` writes the new states
    in place. Repeating or selecting rows (a copy either way) drops the buffers; the next update
    allocates them again at that size."""

    def __init__(self, reserve: int) -> None:
        super().__init__()
        self.reserve = reserve
        self._capacity = 0
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.get_seq_length()
        end = start + key_states.shape[-2]
        if self._buffers is None or self._buffers[0].shape[-2] < end:
            self._capacity = max(self._capacity or end + self.reserve, end)
            shape = (*key_states.shape[:-2], self._capacity, key_states.shape[-1])
            keys, values = key_states.new_empty(shape), value_states.new_empty(shape)
            if start:
                keys[..., :start, :] = self.keys
                values[..., :start, :] = self.values
            self._buffers = (keys, values)
        keys, values = self._buffers
        keys[..., start:end, :] = key_states
        values[..., start:end, :] = value_states
        self.keys, self.values = keys[..., :end, :], values[..., :end, :]
        return self.keys, self.values

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._buffers = None

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._buffers = None


def sample_next_tokens(
    logits: torch.Tensor,
    sampling: SamplingParams,
    rng: torch.Generator | None = None,
    *,
    uniform: torch.Tensor | None = None,
) -> torch.Tensor:
    """Next token per row from logits [B, V]: argmax at temperature 0, else one draw from
    softmax(logits / temperature) after the top-p filter. Returns LongTensor[B].

    The draw uses one uniform number per row: `uniform` (float64 [B] in [0, 1)) when given,
    else drawn from `rng`.

    Draws by inverting the float64 CDF with one uniform number per row: exact to float64
    rounding, never picks a token of probability 0, and costs one cumsum where
    torch.multinomial on CPU costs about 1 ms per row over a 49k vocabulary.

    Raises NonFiniteError when some row's logits define no distribution: a NaN, a +inf, or
    nothing but -inf (a -inf for some tokens is fine: probability 0). The check reads B numbers
    the draw computes anyway (the chosen logit, or the softmax total), one sync per call."""
    if sampling.temperature == 0:
        token = logits.argmax(dim=-1)
        # argmax takes NaN for the largest value; a +inf, or a row of -inf, has no meaningful
        # argmax either: the chosen logits are all finite exactly when every row is sound.
        if not bool(torch.isfinite(logits.gather(-1, token[:, None])).all()):
            raise _non_finite_logits(logits)
        return token
    scaled = logits.float() / sampling.temperature
    if sampling.top_p < 1.0:
        scaled = top_p_filter(scaled, sampling.top_p)
    cdf = scaled.softmax(dim=-1, dtype=torch.float64).cumsum(dim=-1)
    total = cdf[:, -1:]
    # A NaN or +inf logit, or a row of -inf, makes the row's softmax NaN, hence its total: one
    # check of B numbers instead of B x V (a row of finite logits sums to 1).
    if not bool(torch.isfinite(total).all()):
        raise _non_finite_logits(logits)
    if uniform is None:
        uniform = torch.rand(total.shape, generator=rng, dtype=torch.float64, device=cdf.device)
    else:
        uniform = uniform.to(torch.float64).reshape(total.shape)
    # Keep the target strictly below the last CDF value, so some token always lies above it.
    target = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).squeeze(1)


def _non_finite_logits(logits: torch.Tensor) -> NonFiniteError:
    """The error for logits [B, V] that give no distribution: how many rows hold a NaN, a +inf,
    or nothing but -inf (computed only once something is wrong)."""
    kinds = {
        "NaN": torch.isnan(logits).any(dim=-1),
        "+inf": torch.isposinf(logits).any(dim=-1),
        "only -inf": torch.isneginf(logits).all(dim=-1),
    }
    rows = logits.shape[0]
    found = [f"{kind} in {int(b.sum())} of {rows} rows" for kind, b in kinds.items() if b.any()]
    # All finite and still no distribution: logits / temperature overflowed.
    detail = "; ".join(found) or "finite, but they overflow once divided by the temperature"
    return NonFiniteError(
        f"logits ({detail})",
        hint="the policy's outputs are no longer numbers: training diverged (too large a "
        "learning rate?) or the weights are damaged",
    )


def _left_pad(sequences: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """LongTensor[B, L] ids and mask, each sequence right-aligned (left padding)."""
    width = max(len(ids) for ids in sequences)
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        if sequence:
            ids[row, width - len(sequence) :] = torch.tensor(sequence)
            mask[row, width - len(sequence) :] = 1
    return ids, mask
