"""The actor loss with AMIR-GRPO's term, for verl's `set_loss_fn` (docs/guides/verl.md, "The AMIR
loss"; docs/algorithms.md §2).

`amir_ppo_loss` is verl's own `ppo_loss` plus lambda * L_pref in the per-completion form of
`preference_coefficients`: each response row carries its coefficient in the batch field
`COEFFICIENTS` (`amir_row_weights`: c_k times lambda times the rows the coefficients were computed
over), and the loss of a micro-batch adds

    sum_k w_k * (l_k - sg(l_k)) / global_batch_size * dp_size

with l_k the row's mean token log-prob under the current policy. That is verl's own
normalisation of a sequence-level mean ("seq-mean" of agg_loss: the mini-batch's row count
across ranks, times dp_size against the ranks' gradient averaging), so the gradient summed over
a mini-batch's micro-batches and ranks is lambda * (B / mini-batch rows) * sum_k c_k grad l_k
whatever the split, the order or the number of ranks: a pair's two rows may sit in different
micro-batches, since each row carries its own share. With one mini-batch it is exactly
lambda * grad L_pref at the rollout policy. The term's value is 0, so that verl's logged loss
stays its own; L_pref itself is logged by the driver (`amir/preference_loss`).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from groupwise.algorithms.logprobs import sequence_mean_logp
from groupwise.algorithms.preference import preference_surrogate

COEFFICIENTS = "groupwise_amir_weights"
"""The batch field of each response's AMIR weight w_k ([B] float, `amir_row_weights`)."""


def amir_row_weights(coefficients: Tensor, lambda_value: float) -> Tensor:
    """w_k = lambda * B * c_k ([B]) from the B coefficients of one training batch
    (preference_coefficients over its pairs): in units of a mean over rows, as verl's losses."""
    return coefficients * (lambda_value * coefficients.numel())


def amir_ppo_loss(
    config: Any, model_output: dict[str, Tensor], data: Any, dp_group: Any = None
) -> tuple[Tensor, dict[str, Any]]:
    """verl's `ppo_loss(config, model_output, data, dp_group)` plus the AMIR term of the
    micro-batch `data` (module docstring); without the COEFFICIENTS field, ppo_loss alone.
    data["global_batch_size"] and data["dp_size"] are verl's (set by its actor for every
    micro-batch); the AMIR term needs the first, or it would depend on the split."""
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding

    loss, metrics = ppo_loss(config, model_output, data, dp_group)
    if COEFFICIENTS not in data.keys():  # noqa: SIM118 (a TensorDict refuses `in`)
        return loss, metrics
    rows = data["global_batch_size"]
    if rows is None:
        raise ValueError(
            "groupwise's AMIR loss needs verl's global_batch_size in each micro-batch (the "
            "mini-batch's rows), to be the same for any micro-batch split"
        )
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    padded = data.select("response_mask", COEFFICIENTS).to_padded_tensor()
    mask = padded["response_mask"].bool()
    weights = padded[COEFFICIENTS].reshape(-1).to(log_prob.dtype)
    mean_logp = sequence_mean_logp(log_prob, mask)
    surrogate = preference_surrogate(mean_logp - mean_logp.detach(), weights)
    return loss + surrogate * (data["dp_size"] / rows), metrics
