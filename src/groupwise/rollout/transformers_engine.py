"""Rollout engine on a transformers causal LM (CPU or GPU, plain or peft model).

Each chunk of prompts is encoded once and prefilled once; its KV cache is then repeated n
times along the batch (row i*n + j is sample j of prompt i) and the n samples are decoded
step by step with temperature / top-p, each row stopping at its first EOS token. Sharing the
prefill saves (n - 1) prompt passes per prompt compared with `model.generate(
num_return_sequences=n)`, which prefills every copy; rows that finished are dropped from the
batch once they make up a quarter of it, so a few long completions do not drag the short
ones along.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedTokenizerBase

from groupwise.rollout.types import Rollouts, SamplingParams

__all__ = [
    "TransformersGenerator",
    "cache_kwarg",
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
        self._cache_kwarg = cache_kwarg(model)

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingParams) -> Rollouts:
        """n completions for each prompt, group-major, as Rollouts."""
        if isinstance(prompts, str) or not prompts:
            raise ValueError("prompts must be a non-empty list of strings")
        if n < 1:
            raise ValueError(f"n (samples per prompt) must be >= 1, got {n}")
        encoded = self.tokenizer(
            list(prompts), add_special_tokens=self.add_special_tokens, padding=False
        )["input_ids"]
        empty = [i for i, ids in enumerate(encoded) if not ids]
        if empty:
            raise ValueError(
                f"prompts {empty[:5]} encode to no tokens; a prompt needs at least one"
            )
        device = next(self.model.parameters()).device
        rng = torch.Generator(device=device)
        if sampling.seed is None:
            rng.seed()
        else:
            rng.manual_seed(sampling.seed)

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
                        ids.to(device), mask.to(device), n, sampling, rng
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
        rng: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode n samples for each prompt of one chunk.

        Returns tokens LongTensor[B*n, max_new_tokens] (pad after a row's end) and lengths
        LongTensor[B*n] (tokens generated, EOS included; -1 where no EOS came: truncated).
        """
        positions = (prompt_mask.cumsum(dim=1) - 1).clamp(min=0)
        # The model fills this cache in place; holding it ourselves spares reading it back from
        # an output field whose name changed across transformers versions.
        cache = DynamicCache(config=self.model.config)
        out = self.model(
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
            token = torch.where(live, sample_next_tokens(logits, sampling, rng), self.pad_token_id)
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
            out = self.model(
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


def sample_next_tokens(
    logits: torch.Tensor, sampling: SamplingParams, rng: torch.Generator
) -> torch.Tensor:
    """Next token per row from logits [B, V]: argmax at temperature 0, else one draw from
    softmax(logits / temperature) after the top-p filter. Returns LongTensor[B].

    Draws by inverting the float64 CDF with one uniform number per row: exact to float64
    rounding, never picks a token of probability 0, and costs one cumsum where
    torch.multinomial on CPU costs about 1 ms per row over a 49k vocabulary."""
    if sampling.temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / sampling.temperature
    if sampling.top_p < 1.0:
        scaled = top_p_filter(scaled, sampling.top_p)
    cdf = scaled.softmax(dim=-1, dtype=torch.float64).cumsum(dim=-1)
    total = cdf[:, -1:]
    uniform = torch.rand(total.shape, generator=rng, dtype=torch.float64, device=cdf.device)
    # Keep the target strictly below the last CDF value, so some token always lies above it.
    target = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).squeeze(1)


def cache_kwarg(model: torch.nn.Module) -> str:
    """Name of the forward argument that takes the KV cache: `cache` in recent transformers,
    `past_key_values` before (looked up on the base model under a peft wrapper)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    parameters = inspect.signature(base.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


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
