"""completion_logprobs: equals a direct log_softmax of the full forward pass, with left-padded
prompts, right-padded completions, temperature, and the chunked (memory-bounded) path; its
batched means completion_mean_logp and rollout_mean_logp."""

from __future__ import annotations

import importlib
import math
import sys

import pytest
import torch

from groupwise.completion_logprobs import (
    completion_logprobs,
    completion_mean_logp,
    rollout_mean_logp,
)
from groupwise.models import load_model
from groupwise.rollout import Rollouts


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_model("tiny-random", seed=3)
    return model.eval(), tokenizer


def _batch():
    # Two prompts of different lengths (left padded with 0), completions of lengths 3 and 2.
    prompt_ids = torch.tensor([[0, 0, 11, 12], [21, 22, 23, 24]])
    prompt_mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    completion_ids = torch.tensor([[31, 32, 33], [41, 42, 0]])
    completion_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def _direct(model, prompt, completion, temperature=1.0):
    """log p of each completion token from one unpadded forward pass of prompt + completion."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0] / temperature
    logp = torch.log_softmax(logits.float(), dim=-1)
    start = len(prompt) - 1
    return torch.stack([logp[start + t, tok] for t, tok in enumerate(completion)])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_matches_unpadded_forward(tiny, temperature: float) -> None:
    model, _ = tiny
    with torch.no_grad():
        got = completion_logprobs(model, *_batch(), temperature=temperature)
        row0 = _direct(model, [11, 12], [31, 32, 33], temperature)
        row1 = _direct(model, [21, 22, 23, 24], [41, 42], temperature)
    assert got.shape == (2, 3) and got.dtype == torch.float32
    torch.testing.assert_close(got[0], row0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1, :2], row1, atol=1e-5, rtol=1e-5)


def test_chunked_path_gives_same_values_and_gradients(tiny) -> None:
    model, _ = tiny
    weight = model.get_output_embeddings().weight

    def run(max_bytes: int):
        model.zero_grad()
        logp = completion_logprobs(model, *_batch(), max_logits_bytes=max_bytes)
        mask = _batch()[3].bool()
        logp[mask].sum().backward()
        return logp.detach(), weight.grad.clone()

    direct, grad_direct = run(1 << 40)
    # One position of a 2-row batch per chunk: 2 * V * 4 bytes.
    chunked, grad_chunked = run(2 * weight.shape[0] * 4)
    mask = _batch()[3].bool()
    torch.testing.assert_close(chunked[mask], direct[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad_chunked, grad_direct, atol=1e-5, rtol=1e-4)


def test_rejects_zero_temperature(tiny) -> None:
    with pytest.raises(ValueError, match="temperature must be > 0"):
        completion_logprobs(tiny[0], *_batch(), temperature=0.0)


def test_completion_mean_logp_matches_log_softmax_by_hand(tiny) -> None:
    model, _ = tiny
    pad = 0
    prompts = [[5, 17, 230], [44]]  # left padded to width 3
    completions = [[9, 10, 11, 12], [301, 2]]  # right padded to width 4
    prompt_ids = torch.tensor([[5, 17, 230], [pad, pad, 44]])
    prompt_mask = torch.tensor([[1, 1, 1], [0, 0, 1]])
    completion_ids = torch.tensor([[9, 10, 11, 12], [301, 2, pad, pad]])
    completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    got = completion_mean_logp(
        model, prompt_ids, prompt_mask, completion_ids, completion_mask, batch_size=1
    )
    for row, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        ids = torch.tensor([p + c])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]
        logp = torch.log_softmax(logits.double(), dim=-1)
        # token c[t] sits at position len(p) + t and is predicted by position len(p) + t - 1
        by_hand = sum(float(logp[len(p) + t - 1, tok]) for t, tok in enumerate(c)) / len(c)
        assert float(got[row]) == pytest.approx(by_hand, abs=1e-5)
    empty = completion_mean_logp(
        model,
        prompt_ids[:1],
        prompt_mask[:1],
        torch.zeros(1, 2, dtype=torch.long),
        torch.zeros(1, 2, dtype=torch.long),
    )
    assert math.isnan(float(empty[0]))
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        completion_mean_logp(model, prompt_ids, prompt_mask, completion_ids, completion_mask, 0)


def test_rollout_mean_logp_gives_each_completion_its_own_prompt(tiny) -> None:
    model, _ = tiny
    prompt_ids, prompt_mask, completion_ids, completion_mask = _batch()
    # group_size 2: prompt row 0 serves completion rows 0 and 1, prompt row 1 rows 2 and 3
    rows = torch.tensor([0, 1, 1, 0])
    rollouts = Rollouts(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids[rows],
        completion_mask=completion_mask[rows],
        texts=["a", "b", "c", "d"],
        truncated=torch.zeros(4, dtype=torch.bool),
        group_size=2,
    )
    got = rollout_mean_logp(model, rollouts, batch_size=3)
    expected = completion_mean_logp(
        model,
        prompt_ids[[0, 0, 1, 1]],
        prompt_mask[[0, 0, 1, 1]],
        completion_ids[rows],
        completion_mask[rows],
        batch_size=1,
    )
    assert got.shape == (4,)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # the same completion under different prompts scores differently
    assert abs(float(got[0]) - float(got[3])) > 1e-4


def test_the_old_module_name_still_imports_with_a_deprecation_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "groupwise.scoring", raising=False)
    with pytest.warns(DeprecationWarning, match="groupwise.completion_logprobs"):
        old = importlib.import_module("groupwise.scoring")
    assert old.completion_logprobs is completion_logprobs


def test_eager_attention_policy_gives_the_same_values_and_gradients() -> None:
    """model.attention=eager (load_trainable_policy) changes the kernel, not the log-probs or
    their gradients: left-padded prompts, a padded completion, LoRA gradients, float32."""
    from groupwise.train.config import ModelConfig
    from groupwise.train.policy import load_trainable_policy

    def run(attention: str | None):
        torch.manual_seed(0)  # the same LoRA initialisation on both sides
        model, _ = load_trainable_policy(
            ModelConfig(name="tiny-random", seed=3, attention=attention), "cpu"
        )
        logp = completion_logprobs(model, *_batch())
        mask = _batch()[3].bool()
        logp[mask].sum().backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        return model.config._attn_implementation, logp.detach()[mask], grads

    kernel, sdpa, sdpa_grads = run(None)
    eager_kernel, eager, eager_grads = run("eager")
    assert (kernel, eager_kernel) == ("sdpa", "eager")
    torch.testing.assert_close(eager, sdpa, atol=1e-5, rtol=1e-5)
    assert sdpa_grads.keys() == eager_grads.keys() and sdpa_grads
    for name, grad in sdpa_grads.items():
        torch.testing.assert_close(eager_grads[name], grad, atol=1e-5, rtol=1e-4)
