"""Chunked token log-probs and length-normalised means (docs/algorithms.md §1-3)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from groupwise.algorithms import sequence_mean_logp, token_logprobs


def _reference(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def test_token_logprobs_hand_computed():
    # logits (0, log 3): softmax = (1/4, 3/4)
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])
    out = token_logprobs(logits, torch.tensor([[1, 0]]))
    torch.testing.assert_close(out, torch.tensor([[math.log(0.75), math.log(0.25)]]))


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 21, 100])
def test_token_logprobs_matches_log_softmax(chunk_size):
    # B*T = 21 positions: chunk 4 does not divide 21, 7 and 21 do, 100 exceeds it
    generator = torch.Generator().manual_seed(chunk_size)
    logits = (torch.randn(3, 7, 11, generator=generator) * 4).requires_grad_()
    tokens = torch.randint(0, 11, (3, 7), generator=generator)
    out = token_logprobs(logits, tokens, chunk_size=chunk_size)
    assert out.dtype == torch.float32 and out.shape == (3, 7)
    expected = _reference(logits, tokens)
    torch.testing.assert_close(out, expected)
    weights = torch.randn(3, 7, generator=generator)
    (grad,) = torch.autograd.grad((out * weights).sum(), logits)
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), logits)
    torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_token_logprobs_temperature_and_gradient(dtype):
    # log softmax(z / tau)[token]; d/dz = (onehot - softmax(z / tau)) * g / tau, written out
    generator = torch.Generator().manual_seed(3)
    tau = 0.7
    logits = (torch.randn(2, 5, 13, generator=generator) * 3).to(dtype).requires_grad_()
    tokens = torch.randint(0, 13, (2, 5), generator=generator)
    out = token_logprobs(logits, tokens, chunk_size=3, temperature=tau)
    scaled = logits.detach().float() / tau
    torch.testing.assert_close(out, _reference(scaled, tokens))
    weights = torch.randn(2, 5, generator=generator)
    (grad,) = torch.autograd.grad((out * weights).sum(), logits)
    onehot = torch.nn.functional.one_hot(tokens, 13).float()
    expected = (onehot - torch.softmax(scaled, dim=-1)) * weights[..., None] / tau
    assert grad.dtype == dtype
    tolerance = {"atol": 1e-6, "rtol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(grad, expected.to(dtype), **tolerance)
    # the gradient of a log-prob sums to 0 over the vocabulary at every position
    torch.testing.assert_close(grad.float().sum(-1), torch.zeros(2, 5), atol=1e-2, rtol=0)


def test_token_logprobs_backward_allocates_one_gradient_buffer():
    # float32 logits [2, 64, 1000] in chunks of 16 positions: the backward pass holds the
    # gradient (512 kB) and no second full-size buffer (the autograd of gather minus logsumexp
    # kept one zero-filled gradient per chunk)
    logits = torch.randn(2, 64, 1000, requires_grad=True)
    tokens = torch.randint(0, 1000, (2, 64))
    out = token_logprobs(logits, tokens, chunk_size=16)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out.sum().backward()
    full = 2 * 64 * 1000 * 4
    # allocations as the allocating op records them (its callers repeat them, summed)
    sizes = [
        event.cpu_memory_usage
        for event in prof.events()
        if event.name in ("aten::empty", "aten::empty_strided") and event.cpu_memory_usage > 0
    ]
    assert max(sizes) == full and sum(size >= full for size in sizes) == 1


def test_token_logprobs_low_precision_logits_give_float32():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 50, generator=generator).to(torch.bfloat16)
    tokens = torch.randint(0, 50, (2, 5), generator=generator)
    out = token_logprobs(logits, tokens, chunk_size=3)
    assert out.dtype == torch.float32
    # the logsumexp is taken in float32 of the bf16 values: equal to float32 log_softmax
    torch.testing.assert_close(out, _reference(logits, tokens))


def test_token_logprobs_never_allocates_a_full_float32_copy():
    # bf16 logits [4, 64, 1000]: a float32 log-softmax of all of it is 4*64*1000*4 B = 1 MB;
    # with chunks of 16 positions no single allocation may exceed 16*1000*4 B = 64 kB
    logits = torch.randn(4, 64, 1000).to(torch.bfloat16)
    tokens = torch.randint(0, 1000, (4, 64))
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = token_logprobs(logits, tokens, chunk_size=16)
    largest = max(event.cpu_memory_usage for event in prof.events())
    assert 0 < largest <= 16 * 1000 * 4
    torch.testing.assert_close(out, _reference(logits, tokens))


def test_token_logprobs_large_logits_stay_finite():
    logits = torch.tensor([[[1e4, 0.0, -1e4]]])
    out = token_logprobs(logits, torch.tensor([[1]]))
    assert out.item() == pytest.approx(-1e4)


def test_token_logprobs_errors():
    with pytest.raises(ValueError, match=r"logits must be a float tensor \[B, T, V\]"):
        token_logprobs(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens must be a tensor of shape \(2, 3\)"):
        token_logprobs(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer ids"):
        token_logprobs(torch.zeros(2, 3, 5), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1"):
        token_logprobs(torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), chunk_size=0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        token_logprobs(torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), temperature=0)


def test_sequence_mean_logp_hand_computed_and_gradient():
    token_logp = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, math.nan, math.nan]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    out = sequence_mean_logp(token_logp, mask)
    # row 0: (-1 - 2) / 2 = -1.5; row 1 has no completion tokens: 0 (NaN padding ignored)
    torch.testing.assert_close(out, torch.tensor([-1.5, 0.0]))
    out.sum().backward()
    # d mean / d logp_t = 1 / |o| on completion tokens
    torch.testing.assert_close(token_logp.grad, torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]))


def test_sequence_mean_logp_errors():
    with pytest.raises(ValueError, match="mask must be a tensor of token_logp's shape"):
        sequence_mean_logp(torch.zeros(2, 3), torch.ones(2, 2))
    with pytest.raises(ValueError, match="0/1"):
        sequence_mean_logp(torch.zeros(1, 2), torch.tensor([[0.5, 1.0]]))
