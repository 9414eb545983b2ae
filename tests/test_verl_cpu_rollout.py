"""The CPU rollout `hf_cpu` of the end-to-end runs (tests/verl_cpu/rollout.py) samples as verl's
vLLM server: from the tempered, top-k and top-p filtered distribution, whose log-probs it
returns (vLLM's processed_logprobs; hand-computed on four tokens of probabilities 0.1, 0.2, 0.3
and 0.4), and says "length" for a response cut at its budget."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl_cpu.rollout import processed_log_probs, sample_response

from groupwise.data.synthetic import generate_problems
from groupwise.models import ARITH_BASE_DIR

LOGITS = torch.tensor([1.0, 2.0, 3.0, 4.0]).log()


@pytest.mark.parametrize(
    ("temperature", "top_p", "top_k", "probabilities"),
    [
        (1.0, 1.0, -1, [0.1, 0.2, 0.3, 0.4]),
        (1.0, 1.0, 0, [0.1, 0.2, 0.3, 0.4]),  # vLLM's "all" is -1 or 0
        (1.0, 1.0, 2, [0, 0, 3 / 7, 4 / 7]),
        # top_p: drop the least likely tokens whose cumulative probability is <= 1 - top_p
        (1.0, 0.8, -1, [0, 2 / 9, 3 / 9, 4 / 9]),
        (1.0, 0.65, -1, [0, 0, 3 / 7, 4 / 7]),
        (1.0, 0.01, -1, [0, 0, 0, 1]),  # at least one token stays
        # top_k first, then top_p over what is left (2/9, 3/9, 4/9: 2/9 <= 0.5 goes)
        (1.0, 0.5, 3, [0, 0, 3 / 7, 4 / 7]),
        (2.0, 1.0, -1, [math.sqrt(k) / sum(map(math.sqrt, (1, 2, 3, 4))) for k in (1, 2, 3, 4)]),
        (0.0, 1.0, -1, [0, 0, 0, 1]),  # greedy
    ],
)
def test_sampling_distribution_is_vllms_processed_one(temperature, top_p, top_k, probabilities):
    logp = processed_log_probs(LOGITS, temperature, top_p, top_k)
    want = torch.tensor(probabilities, dtype=torch.float32)
    torch.testing.assert_close(logp.exp(), want, atol=1e-6, rtol=0)
    assert float(logp.exp().sum()) == pytest.approx(1.0)
    assert bool((logp[want == 0] == float("-inf")).all())


def test_filtering_only_raises_a_kept_tokens_log_prob() -> None:
    """Renormalised over fewer tokens, each kept token's log-prob is at least the unfiltered
    one's: what the end-to-end run checks against verl's actor's log-probs."""
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0)) * 3
    full = processed_log_probs(logits, 1.0, 1.0, -1)
    cut = processed_log_probs(logits, 1.0, 0.9, 20)
    kept = cut > float("-inf")
    assert 1 <= int(kept.sum()) <= 20
    assert bool((cut[kept] > full[kept]).all())
    assert float(full[kept].exp().sum()) >= 0.9 or int(kept.sum()) == 20


def test_a_response_cut_at_the_budget_says_length_and_one_that_ends_says_completed() -> None:
    """sample_response with groupwise's arith-base policy: a budget of 3 tokens cuts the answer
    ("length", 3 tokens); a budget of 200 lets it end at the EOS token ("completed"); each
    log-prob is the processed distribution's, recomputed here."""
    model = AutoModelForCausalLM.from_pretrained(ARITH_BASE_DIR, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(ARITH_BASE_DIR)
    prompt = tokenizer(generate_problems("train", level="mid", size=1, seed=0)[0].question)
    prompt_ids = prompt["input_ids"]
    params = {"temperature": 1.0, "top_p": 0.9, "top_k": 20}
    with torch.no_grad():
        cut = sample_response(model, prompt_ids, params, 3, torch.Generator().manual_seed(0))
        whole = sample_response(model, prompt_ids, params, 200, torch.Generator().manual_seed(0))
        assert (cut.stop_reason, len(cut.token_ids)) == ("length", 3)
        assert whole.stop_reason == "completed"
        assert whole.token_ids[-1] == model.config.eos_token_id
        assert whole.token_ids[:3] == cut.token_ids  # the same generator, the same first draws
        ids = torch.tensor([prompt_ids + whole.token_ids])
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1]
    want = [
        float(processed_log_probs(row, 1.0, 0.9, 20)[token])
        for row, token in zip(logits, whole.token_ids, strict=True)
    ]
    assert whole.log_probs == pytest.approx(want, abs=1e-5)
