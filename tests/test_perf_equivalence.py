"""The speed work changes no number that matters: the shared-prompt forward gives the log-probs
and gradients of repeated prompts, the inference copy decodes the policy's current weights,
and each prompt's samples ignore the prompts they share a batch with. (The trainer's gradient on
a fixed batch against docs/algorithms.md: tests/test_trainer_gradients.py.)"""

from __future__ import annotations

import copy

import pytest
import torch

from groupwise.completion_logprobs import completion_logprobs
from groupwise.models import LoraSettings, attach_lora, load_model
from groupwise.rollout import SamplingParams, TransformersGenerator
from groupwise.rollout.transformers_engine import InferenceCopy

# Two prompts (the first left padded), two completions each, right padded to 4 tokens.
PROMPT_IDS = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25]])
PROMPT_MASK = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
COMPLETION_IDS = torch.tensor([[31, 32, 33, 0], [41, 42, 43, 44], [51, 0, 0, 0], [61, 62, 0, 0]])
COMPLETION_MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random", seed=3)


def lora_model(tiny, seed: int = 3) -> torch.nn.Module:
    """tiny-random with LoRA whose B is random (B = 0 would make the adapter invisible)."""
    model = attach_lora(copy.deepcopy(tiny[0]), LoraSettings(r=4, alpha=8))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return model.eval()


def logprobs_and_grads(model, shared: bool, max_bytes: int = 1 << 40):
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad()
    prompts = (PROMPT_IDS, PROMPT_MASK)
    if not shared:
        prompts = tuple(t.repeat_interleave(2, dim=0) for t in prompts)
    logp = completion_logprobs(
        model,
        *prompts,
        COMPLETION_IDS,
        COMPLETION_MASK,
        max_logits_bytes=max_bytes,
        group_size=2 if shared else 1,
    )
    # Weights that differ per token, so every position's gradient counts.
    weights = torch.arange(1, 17, dtype=torch.float32).view(4, 4) / 16
    (logp * weights)[COMPLETION_MASK.bool()].sum().backward()
    return logp.detach(), [p.grad.clone() for p in params]


@pytest.mark.parametrize("max_bytes", [1 << 40, 1000], ids=["whole", "chunked-head"])
def test_shared_prompt_forward_equals_repeated_prompts(tiny, max_bytes: int) -> None:
    model = lora_model(tiny)
    repeated, repeated_grads = logprobs_and_grads(model, shared=False)
    shared, shared_grads = logprobs_and_grads(model, shared=True, max_bytes=max_bytes)
    mask = COMPLETION_MASK.bool()
    torch.testing.assert_close(shared[mask], repeated[mask], atol=2e-6, rtol=1e-5)
    for got, want in zip(shared_grads, repeated_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert any(g.abs().max() > 1e-3 for g in shared_grads)  # gradients that mean something


def test_shared_prompt_forward_under_gradient_checkpointing_repeats_prompts(tiny) -> None:
    model = lora_model(tiny)
    expected, _ = logprobs_and_grads(model, shared=False)
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    model.train()  # transformers turns the cache off here; the prompts are repeated instead
    got, grads = logprobs_and_grads(model, shared=True)
    mask = COMPLETION_MASK.bool()
    torch.testing.assert_close(got[mask], expected[mask], atol=2e-6, rtol=1e-5)
    assert all(torch.isfinite(g).all() for g in grads)


def test_group_size_must_match_the_rows(tiny) -> None:
    model = lora_model(tiny)
    with pytest.raises(ValueError, match="2 prompt rows x group_size 3 != 4 completion rows"):
        completion_logprobs(
            model, PROMPT_IDS, PROMPT_MASK, COMPLETION_IDS, COMPLETION_MASK, group_size=3
        )


def test_inference_copy_follows_the_policy_without_touching_it(tiny) -> None:
    model = lora_model(tiny)
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    copy = InferenceCopy(model)
    x = torch.tensor([[5, 6, 7, 8, 9]])

    def gap() -> float:
        with torch.no_grad():
            return float((model(input_ids=x).logits - copy.model(input_ids=x).logits).abs().max())

    assert not hasattr(copy.model, "peft_config")  # a plain model: no adapter matmuls
    assert gap() < 1e-5
    assert copy.refresh() == 0  # nothing changed since it was built
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())

    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    model(input_ids=x).logits.sum().backward()
    optimizer.step()
    assert gap() > 1e-4  # stale until refreshed
    # tiny-random: 2 layers x 7 adapted linear layers changed; embeddings and norms did not.
    assert copy.refresh() == 14
    assert gap() < 1e-5

    half = InferenceCopy(model, torch.bfloat16)
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        logits = model(input_ids=x).logits
        close = (half.model(input_ids=x).logits.float() - logits).abs().max()
    assert close < 0.05 * logits.abs().max()


def test_generator_on_the_inference_copy_samples_what_the_policy_samples(tiny) -> None:
    model = lora_model(tiny)
    tokenizer = tiny[1]
    sampling = SamplingParams(max_new_tokens=8, seed=5)
    prompts = ["What is 2 + 3?", "Name a prime."]
    direct = TransformersGenerator(model, tokenizer).generate(prompts, 3, sampling)
    copied = TransformersGenerator(model, tokenizer, inference_copy=True)
    assert copied.decoder_model is not model
    again = copied.generate(prompts, 3, sampling)
    assert torch.equal(direct.completion_ids, again.completion_ids)


def test_a_prompts_samples_do_not_depend_on_the_other_prompts_of_the_batch(tiny) -> None:
    model, tokenizer = tiny
    sampling = SamplingParams(max_new_tokens=10)
    together = TransformersGenerator(model, tokenizer).generate(
        ["First question here", "2nd"], 4, sampling, prompt_seeds=[7, 8]
    )
    alone = TransformersGenerator(model, tokenizer).generate(["2nd"], 4, sampling, prompt_seeds=[8])
    chunked = TransformersGenerator(model, tokenizer, batch_size=4).generate(
        ["First question here", "2nd"], 4, sampling, prompt_seeds=[7, 8]
    )
    assert together.texts[4:] == alone.texts
    assert chunked.texts == together.texts
    assert together.texts[:4] != together.texts[4:]
    with pytest.raises(ValueError, match="1 prompt_seeds for 2 prompts"):
        TransformersGenerator(model, tokenizer).generate(["a", "b"], 1, sampling, prompt_seeds=[1])
