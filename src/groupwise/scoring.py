"""Per-token log-probs of completions under a model: the one forward pass that training,
evaluation and analysis share.

The prompt is left padded and the completion right padded, so positions are computed from the
attention mask (as generation does): a completion token sees the same positions at scoring time
as it did when it was sampled.

Memory: only the completion positions go through the output layer. When their float32 logits
would exceed `max_logits_bytes`, the output layer runs in chunks of positions, each recomputed
in the backward pass (activation checkpointing), so the full [B, T, V] logits never exist at
once: a 4096-token completion batch with a 150k vocabulary stays within memory.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from groupwise.algorithms import token_logprobs

DEFAULT_MAX_LOGITS_BYTES = 1 << 30


def completion_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    max_logits_bytes: int = DEFAULT_MAX_LOGITS_BYTES,
) -> torch.Tensor:
    """log pi(o_t | q, o_<t) for every completion token (REFERENCE.md 1; l(q, o) of 2 is its mean).

    Args:
        model: a causal LM (transformers, or a peft model around one).
        prompt_ids, prompt_mask: LongTensor[B, P], left padded (mask 1 on prompt tokens).
        completion_ids, completion_mask: LongTensor[B, T], right padded (mask 1 on completion
            tokens including the EOS that ended them).
        temperature: logits are divided by it, so the log-probs are those of the distribution
            the completions were sampled from (as TRL does); 1.0 gives the raw model.
        max_logits_bytes: above this size of float32 completion logits, the output layer runs
            in checkpointed chunks (same values, bounded memory).

    Returns:
        Tensor[B, T] float32 log-probs (nats); positions where completion_mask is 0 hold finite
        values of no meaning (callers mask them).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to score completions, got {temperature}")
    batch, full_length = completion_ids.shape
    # Drop padding columns shared by every row: they cost compute and change nothing.
    keep_left = max(int(prompt_mask.sum(dim=1).max()), 1)
    prompt_ids, prompt_mask = prompt_ids[:, -keep_left:], prompt_mask[:, -keep_left:]
    length = max(int(completion_mask.sum(dim=1).max()), 1)
    completion_ids = completion_ids[:, :length]
    completion_mask = completion_mask[:, :length]

    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
    inputs = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "use_cache": False,
    }
    vocab = model.get_output_embeddings().weight.shape[0]
    if batch * length * vocab * 4 <= max_logits_bytes:
        # Logits at position p predict token p + 1: the last prompt position predicts o_1.
        logits = model(**inputs, logits_to_keep=length + 1).logits[:, :-1]
        logp = token_logprobs(logits / temperature, completion_ids)
    else:
        hidden = model.get_decoder()(**inputs).last_hidden_state[:, keep_left - 1 : -1]
        chunk = max(1, max_logits_bytes // (batch * vocab * 4))
        head = _output_head(model, temperature)
        pieces = [
            checkpoint(
                head,
                hidden[:, s : s + chunk],
                completion_ids[:, s : s + chunk],
                use_reentrant=False,
            )
            for s in range(0, length, chunk)
        ]
        logp = torch.cat(pieces, dim=1)
    full = logp.new_zeros(batch, full_length)
    full[:, :length] = logp
    return full


def _output_head(model: torch.nn.Module, temperature: float):
    """hidden [B, c, H], tokens [B, c] -> log-probs [B, c], as the model's own head computes."""
    lm_head = model.get_output_embeddings()
    softcap = getattr(model.config, "final_logit_softcapping", None)

    def head(hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        logits = lm_head(hidden)
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        return token_logprobs(logits / temperature, tokens)

    return head
