"""Per-token log-probs of completions under a model: the one forward pass that training,
evaluation and analysis share.

The prompt is left padded and the completion right padded, so positions are computed from the
attention mask (as generation does): a completion token sees the same positions at scoring time
as it did when it was sampled.
"""

from __future__ import annotations

import torch

from groupwise.algorithms import token_logprobs


def completion_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """log pi(o_t | q, o_<t) for every completion token (REFERENCE.md 1, 2: l(q, o)).

    Args:
        prompt_ids, prompt_mask: LongTensor[B, P], left padded (mask 1 on prompt tokens).
        completion_ids, completion_mask: LongTensor[B, T], right padded (mask 1 on completion
            tokens including the EOS that ended them).
        temperature: logits are divided by it, so the log-probs are those of the distribution
            the completions were sampled from (as TRL does); 1.0 gives the raw model.

    Returns:
        Tensor[B, T] float32 of log-probs; positions where completion_mask is 0 hold finite
        values of no meaning (callers mask them).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to score completions, got {temperature}")
    # Drop padding columns shared by every row: they cost compute and change nothing.
    keep_left = int(prompt_mask.sum(dim=1).max())
    prompt_ids, prompt_mask = prompt_ids[:, -keep_left:], prompt_mask[:, -keep_left:]
    batch, full_length = completion_ids.shape
    length = max(int(completion_mask.sum(dim=1).max()), 1)
    completion_ids = completion_ids[:, :length]
    completion_mask = completion_mask[:, :length]

    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
    # Logits at position p predict token p + 1: the last prompt position predicts o_1.
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        logits_to_keep=length + 1,
        use_cache=False,
    ).logits[:, :-1]
    if temperature != 1.0:
        logits = logits / temperature
    logp = token_logprobs(logits, completion_ids)
    full = logp.new_zeros(batch, full_length)
    full[:, :length] = logp
    return full
