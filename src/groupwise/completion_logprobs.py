"""Per-token log-probs of completions under a model: the one forward pass that training,
evaluation and analysis share.

The prompt is left padded and the completion right padded, so positions are computed from the
attention mask (as generation does): a completion token sees the same positions at scoring time
as it did when it was sampled.

Shared prompts: with group_size = n > 1, each prompt row serves n completion rows (a group).
The prompt then goes through the model once and its key/value cache, repeated n times along the
batch, is what the completions attend to; gradients flow back through the cache into the
prompt pass. Same values as n separate prompt copies (to float rounding), with (n - 1) / n of the
prompt compute saved: on GSM8K with a 264-token system prompt and 128-token completions that is
more than half of the training forward and backward.

Memory: only the completion positions go through the output layer. When their float32 logits
would exceed `max_logits_bytes`, the output layer runs in chunks of positions, each recomputed
in the backward pass (activation checkpointing), so the full [B, T, V] logits never exist at
once: a 4096-token completion batch with a 150k vocabulary stays within memory.

Entry points: `completion_logprobs` (per token, differentiable: the trainer's),
`completion_mean_logp` (mean per completion, no gradient, in batches: eval and analysis),
`rollout_mean_logp` (the same for a Rollouts: eval's `logp_fn`) and `ModelScorer` (the same for
lists of token ids: the transformers `TokenScorer` of the analyses, beside the vLLM and server
ones in groupwise.rollout). The pure tensor math under them (log-softmax gather, masked mean)
lives in groupwise.algorithms.logprobs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

from groupwise.algorithms import sequence_mean_logp, token_logprobs, token_logprobs_and_entropy
from groupwise.models import cache_kwarg

if TYPE_CHECKING:
    from groupwise.rollout import Rollouts

DEFAULT_MAX_LOGITS_BYTES = 1 << 30


def completion_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    max_logits_bytes: int = DEFAULT_MAX_LOGITS_BYTES,
    group_size: int = 1,
    entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log pi(o_t | q, o_<t) for every completion token (docs/algorithms.md §1; l(q, o) of 2 is its
    mean), and with `entropy` the entropy of pi(. | q, o_<t) at each of them (docs/algorithms.md,
    "Entropy controls"), from the same chunked pass over the logits.

    Args:
        model: a causal LM (transformers, or a peft model around one).
        prompt_ids, prompt_mask: LongTensor[B / group_size, P], left padded (mask 1 on prompt
            tokens); prompt row i is the prompt of completion rows i*n .. i*n + n - 1.
        completion_ids, completion_mask: LongTensor[B, T], right padded (mask 1 on completion
            tokens including the EOS that ended them).
        temperature: logits are divided by it, so the log-probs are those of the distribution
            the completions were sampled from (as TRL does); 1.0 gives the raw model.
        max_logits_bytes: above this size of float32 completion logits, the output layer runs
            in checkpointed chunks (same values, bounded memory).
        group_size: n, completions per prompt row. n > 1 runs each prompt once and shares its
            key/value cache (module docstring), unless the model is in training mode with
            gradient checkpointing, where transformers turns the cache off: the prompts are
            then repeated n times in one pass.
        entropy: also return the per-token entropies (computed only then).

    Returns:
        Tensor[B, T] float32 log-probs (nats); positions where completion_mask is 0 hold finite
        values of no meaning (callers mask them). With `entropy`: (log-probs, entropies [B, T],
        nats), both differentiable.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to score completions, got {temperature}")
    batch, full_length = completion_ids.shape
    if group_size < 1 or prompt_ids.shape[0] * group_size != batch:
        raise ValueError(
            f"{prompt_ids.shape[0]} prompt rows x group_size {group_size} != {batch} "
            "completion rows"
        )
    # Drop padding columns shared by every row: they cost compute and change nothing.
    keep_left = max(int(prompt_mask.sum(dim=1).max()), 1)
    prompt_ids, prompt_mask = prompt_ids[:, -keep_left:], prompt_mask[:, -keep_left:]
    length = max(int(completion_mask.sum(dim=1).max()), 1)
    completion_ids = completion_ids[:, :length]
    completion_mask = completion_mask[:, :length]

    vocab = model.get_output_embeddings().weight.shape[0]
    # Small enough: the model's own head gives the logits; else hidden states, head in chunks.
    whole = batch * length * vocab * 4 <= max_logits_bytes
    checkpointing = model.training and _activation_checkpointing(model)
    if group_size > 1 and not checkpointing:
        states = _shared_prompt_states(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_size, whole
        )
    else:
        prompt_ids = prompt_ids.repeat_interleave(group_size, dim=0)
        prompt_mask = prompt_mask.repeat_interleave(group_size, dim=0)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        # Logits at position p predict token p + 1: the last prompt position predicts o_1.
        states = _final_states(
            model,
            whole,
            length + 1,
            input_ids=torch.cat([prompt_ids, completion_ids], dim=1),
            attention_mask=attention_mask,
            position_ids=_positions(attention_mask),
            use_cache=False,
        )[:, :-1]

    if whole and entropy:
        logp, entropies = token_logprobs_and_entropy(
            states, completion_ids, temperature=temperature
        )
        return _padded(logp, full_length), _padded(entropies, full_length)
    if whole:
        logp = token_logprobs(states, completion_ids, temperature=temperature)
    else:
        chunk = max(1, max_logits_bytes // (batch * vocab * 4))
        head = _output_head(model, temperature, entropy)
        pieces = [
            checkpoint(
                head,
                states[:, s : s + chunk],
                completion_ids[:, s : s + chunk],
                use_reentrant=False,
            )
            for s in range(0, length, chunk)
        ]
        if entropy:
            logp, entropies = (torch.cat(parts, dim=1) for parts in zip(*pieces, strict=True))
            return _padded(logp, full_length), _padded(entropies, full_length)
        logp = torch.cat(pieces, dim=1)
    return _padded(logp, full_length)


def _padded(values: torch.Tensor, full_length: int) -> torch.Tensor:
    """values [B, length] as [B, full_length], zeros after them."""
    full = values.new_zeros(values.shape[0], full_length)
    full[:, : values.shape[1]] = values
    return full


def completion_mean_logp(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    batch_size: int = 8,
) -> torch.Tensor:
    """Mean log-prob per completion token under `model` at temperature 1, in batches.

    l(q, o) of docs/algorithms.md §2 under the raw model distribution; exp(-l) is the conditional
    perplexity of the AMIR-GRPO analyses.

    Args:
        prompt_ids, prompt_mask: [B, P], left padded.
        completion_ids, completion_mask: [B, T], right padded (mask 1 on completion tokens,
            EOS included).
        batch_size: rows per forward pass, >= 1.

    Returns:
        float32 [B] (nats per token) on the CPU; NaN for a completion with no tokens. No gradient.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for start in range(0, completion_ids.shape[0], batch_size):
            rows = slice(start, start + batch_size)
            mask = completion_mask[rows].to(device)
            logp = completion_logprobs(
                model,
                prompt_ids[rows].to(device),
                prompt_mask[rows].to(device),
                completion_ids[rows].to(device),
                mask,
            )
            mean = sequence_mean_logp(logp, mask).float().cpu()
            mean[mask.sum(dim=1).cpu() == 0] = float("nan")
            out.append(mean)
    return torch.cat(out) if out else torch.zeros(0)


def rollout_mean_logp(
    model: torch.nn.Module, rollouts: Rollouts, batch_size: int = 8
) -> torch.Tensor:
    """`completion_mean_logp` of every completion of `rollouts`: float32 [N*n] (nats per token),
    batch_size completions per forward pass. The `logp_fn` of groupwise.evaluation.evaluate."""
    index = rollouts.prompt_index
    return completion_mean_logp(
        model,
        rollouts.prompt_ids[index],
        rollouts.prompt_mask[index],
        rollouts.completion_ids,
        rollouts.completion_mask,
        batch_size,
    )


def pad_token_rows(
    rows: Sequence[Sequence[int]], pad_token_id: int, left: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """LongTensor[B, L] ids and mask of token-id lists, padded on the left (prompts) or the
    right (completions) with pad_token_id."""
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            columns = slice(width - len(row), width) if left else slice(0, len(row))
            ids[i, columns] = torch.tensor(list(row), dtype=torch.long)
            mask[i, columns] = 1
    return ids, mask


class ModelScorer:
    """The `TokenScorer` (groupwise.rollout.types) of a transformers model: the mean log-prob
    per completion token of each (prompt ids, completion ids) pair, `completion_mean_logp` in
    batches of batch_size rows; None for an empty completion."""

    def __init__(self, model: torch.nn.Module, pad_token_id: int, batch_size: int = 8) -> None:
        self.model, self.pad_token_id, self.batch_size = model, pad_token_id, batch_size

    def mean_logp(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
    ) -> list[float | None]:
        if len(prompt_ids) != len(completion_ids):
            raise ValueError(f"{len(prompt_ids)} prompts for {len(completion_ids)} completions")
        if not prompt_ids:
            return []
        prompts, prompt_mask = pad_token_rows(prompt_ids, self.pad_token_id, left=True)
        completions, completion_mask = pad_token_rows(completion_ids, self.pad_token_id, False)
        means = completion_mean_logp(
            self.model, prompts, prompt_mask, completions, completion_mask, self.batch_size
        )
        return [None if math.isnan(v) else v for v in means.tolist()]


def _activation_checkpointing(model: torch.nn.Module) -> bool:
    """Whether the model recomputes activations in backward (transformers >= 5.24 names it
    is_activation_checkpointing; earlier 5.x is_gradient_checkpointing, since deprecated)."""
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(getattr(model, "is_gradient_checkpointing", False) if flag is None else flag)


def _shared_prompt_states(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    group_size: int,
    logits: bool,
) -> torch.Tensor:
    """Logits (or hidden states) [B, T, *] predicting each completion token, the prompts run once.

    The last prompt position predicts o_1; completion position t predicts o_{t+1}, attending to
    the prompt's cache repeated per completion. Positions continue from each prompt's length.
    """
    cache = DynamicCache(config=model.config)
    kwarg = cache_kwarg(model)
    first = _final_states(
        model,
        logits,
        1,
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=_positions(prompt_mask),
        use_cache=True,
        **{kwarg: cache},
    )
    states = [first.repeat_interleave(group_size, dim=0)]
    length = completion_ids.shape[1]
    if length > 1:
        cache.batch_repeat_interleave(group_size)
        prompt_mask = prompt_mask.repeat_interleave(group_size, dim=0)
        start = prompt_mask.sum(dim=1, keepdim=True)
        steps = torch.arange(length - 1, device=start.device)
        states.append(
            _final_states(
                model,
                logits,
                length - 1,
                input_ids=completion_ids[:, :-1],
                attention_mask=torch.cat([prompt_mask, completion_mask[:, :-1]], dim=1),
                position_ids=start + steps,
                use_cache=True,
                **{kwarg: cache},
            )
        )
    return torch.cat(states, dim=1)


def _final_states(model: torch.nn.Module, logits: bool, keep: int, **inputs) -> torch.Tensor:
    """The last `keep` positions' logits [B, keep, V] (the model's own head) or final hidden
    states [B, keep, H] (for the chunked head)."""
    if logits:
        return model(**inputs, logits_to_keep=keep).logits
    return model.get_decoder()(**inputs).last_hidden_state[:, -keep:]


def _positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of each token: the count of real tokens before it (padding gets 0)."""
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def _output_head(model: torch.nn.Module, temperature: float, entropy: bool = False):
    """hidden [B, c, H], tokens [B, c] -> log-probs [B, c] (and entropies [B, c] with
    `entropy`), as the model's own head computes."""
    lm_head = model.get_output_embeddings()
    softcap = getattr(model.config, "final_logit_softcapping", None)

    def head(hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        logits = lm_head(hidden)
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        if entropy:
            return token_logprobs_and_entropy(logits, tokens, temperature=temperature)
        return token_logprobs(logits, tokens, temperature=temperature)

    return head
