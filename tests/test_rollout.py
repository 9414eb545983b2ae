"""groupwise.rollout: sampling parameters, top-p, the sampler, and the transformers engine on
the tiny random model (greedy against model.generate, EOS handling, seeds, group order)."""

from __future__ import annotations

import math

import pytest
import torch

from groupwise.models import LoraSettings, attach_lora, load_model
from groupwise.rollout import (
    Generator,
    Rollouts,
    SamplingParams,
    TransformersGenerator,
    sample_next_tokens,
    stop_token_ids,
    top_p_filter,
)

PROMPTS = ["What is 2+3?", "Hello", "Compute 17 * 23, then add 4 and explain each step."]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)
# Every 40th token id ends a completion: with the tiny model's near-uniform next-token
# distribution about 1 step in 40 stops, so a short run has rows that stop and rows that do not.
MANY_EOS = list(range(7, 49152, 40))


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random", seed=0)


def ids_of(tokenizer, prompt: str) -> list[int]:
    return tokenizer(prompt, add_special_tokens=False)["input_ids"]


# --- SamplingParams ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("temperature", float("inf")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("max_new_tokens", 0),
        ("max_new_tokens", 2.5),
        ("seed", -1),
        ("seed", 1.0),
    ],
)
def test_sampling_params_reject_bad_values(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"SamplingParams.{field}"):
        SamplingParams(**{field: value})


def test_sampling_params_defaults() -> None:
    assert SamplingParams() == SamplingParams(1.0, 1.0, 256, None)


# --- top-p and the sampler --------------------------------------------------------------------


def test_top_p_filter_hand_computed() -> None:
    # probs 0.10, 0.50, 0.15, 0.25 -> sorted 0.50, 0.25, 0.15, 0.10 with mass above each token
    # 0, 0.50, 0.75, 0.90; a token stays while the mass above it is < top_p.
    logits = torch.tensor([0.10, 0.50, 0.15, 0.25]).log()
    inf = float("-inf")
    cases = {
        0.3: [inf, 0, inf, inf],  # 0.50 alone reaches 0.3
        0.6: [inf, 0, inf, 0],  # 0.50 + 0.25 = 0.75 >= 0.6
        0.8: [inf, 0, 0, 0],  # 0.50 + 0.25 + 0.15 = 0.90 >= 0.8
        0.95: [0, 0, 0, 0],  # all four needed
    }
    for top_p, keep in cases.items():
        filtered = top_p_filter(logits, top_p)
        expected = torch.where(torch.tensor(keep) == 0, logits, torch.tensor(inf))
        assert torch.equal(filtered, expected), top_p
    # Rows are filtered independently; the input is not modified.
    batch = torch.stack([logits, logits.flip(0)])
    filtered = top_p_filter(batch, 0.6)
    assert torch.isinf(filtered).tolist() == [
        [True, False, True, False],
        [False, True, False, True],
    ]
    assert not torch.isinf(batch).any()
    assert torch.equal(top_p_filter(batch, 1.0), batch)
    with pytest.raises(ValueError, match="top_p"):
        top_p_filter(batch, 0.0)


def test_top_p_filter_keeps_the_smallest_sufficient_set() -> None:
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0)) * 2
    for top_p in (0.1, 0.5, 0.9):
        kept = ~torch.isinf(top_p_filter(logits, top_p))
        probs = logits.softmax(-1)
        kept_mass = (probs * kept).sum(-1)
        assert (kept_mass >= top_p - 1e-6).all()
        # Minimal: without its least probable kept token a row falls below top_p.
        smallest_kept = torch.where(kept, probs, torch.inf).min(-1).values
        assert (kept_mass - smallest_kept < top_p).all()
        # A kept token is never less probable than a removed one.
        largest_removed = torch.where(kept, -torch.inf, probs).max(-1).values
        assert (smallest_kept >= largest_removed).all()


def test_sampler_frequencies_match_the_distribution() -> None:
    rows = 40_000
    probs = torch.tensor([0.10, 0.50, 0.15, 0.25, 0.0])
    logits = probs.log().expand(rows, -1)
    rng = torch.Generator().manual_seed(0)
    # Binomial standard deviation of a frequency is at most sqrt(0.25 / 40000) = 0.0025; allow 4.
    counts = torch.bincount(sample_next_tokens(logits, SamplingParams(), rng), minlength=5)
    assert counts[4] == 0  # probability 0 is never drawn
    assert torch.allclose(counts / rows, probs, atol=0.01)
    # Temperature 2 samples from softmax(log p / 2), i.e. proportional to sqrt(p).
    hot = sample_next_tokens(logits, SamplingParams(temperature=2.0), rng)
    sqrt_p = probs.sqrt() / probs.sqrt().sum()
    assert torch.allclose(torch.bincount(hot, minlength=5) / rows, sqrt_p, atol=0.01)
    # top_p 0.6 keeps 0.50 and 0.25, renormalised to 2/3 and 1/3.
    nucleus = sample_next_tokens(logits, SamplingParams(top_p=0.6), rng)
    freq = torch.bincount(nucleus, minlength=5) / rows
    assert freq[0] == freq[2] == freq[4] == 0
    assert math.isclose(freq[1], 2 / 3, abs_tol=0.01) and math.isclose(freq[3], 1 / 3, abs_tol=0.01)
    # Temperature 0 is argmax, whatever the generator.
    assert (sample_next_tokens(logits[:3], SamplingParams(temperature=0), rng) == 1).all()


def test_sampler_is_reproducible_from_the_generator_seed() -> None:
    logits = torch.randn(8, 1000, generator=torch.Generator().manual_seed(1))

    def draw(seed: int) -> torch.Tensor:
        return sample_next_tokens(logits, SamplingParams(), torch.Generator().manual_seed(seed))

    assert torch.equal(draw(5), draw(5))
    assert not torch.equal(draw(5), draw(6))


# --- the engine -------------------------------------------------------------------------------


def test_stop_token_ids_join_tokenizer_and_generation_config(tiny) -> None:
    model, tokenizer = tiny
    assert stop_token_ids(model, tokenizer) == [tokenizer.eos_token_id]
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, 0]
    try:
        assert stop_token_ids(model, tokenizer) == sorted({0, tokenizer.eos_token_id})
    finally:
        model.generation_config.eos_token_id = tokenizer.eos_token_id


def test_shapes_padding_and_group_major_order(tiny) -> None:
    model, tokenizer = tiny
    engine = TransformersGenerator(model, tokenizer, batch_size=64)
    assert isinstance(engine, Generator)
    n = 4
    rollouts = engine.generate(PROMPTS, n, SamplingParams(max_new_tokens=6, seed=0))
    encoded = [ids_of(tokenizer, p) for p in PROMPTS]
    width = max(map(len, encoded))
    assert rollouts.prompt_ids.shape == rollouts.prompt_mask.shape == (3, width)
    for row, ids in enumerate(encoded):  # left padded
        assert rollouts.prompt_ids[row, width - len(ids) :].tolist() == ids
        assert rollouts.prompt_mask[row].tolist() == [0] * (width - len(ids)) + [1] * len(ids)
    assert rollouts.completion_ids.shape == rollouts.completion_mask.shape == (12, 6)
    assert rollouts.truncated.shape == (12,) and rollouts.truncated.dtype == torch.bool
    assert len(rollouts) == 12 and rollouts.num_prompts == 3 and rollouts.group_size == n
    assert rollouts.prompt_index.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    # Built outside inference mode, so the trainer may use them in autograd.
    tensors = [rollouts.prompt_ids, rollouts.prompt_mask, rollouts.completion_ids]
    tensors += [rollouts.completion_mask, rollouts.truncated]
    assert not any(t.is_inference() for t in tensors)

    # Greedy: every sample of prompt i equals prompt i generated alone, so rows i*n..i*n+n-1
    # belong to prompt i; a small batch_size (several chunks) changes nothing.
    greedy = TransformersGenerator(model, tokenizer, batch_size=3).generate(PROMPTS, 3, GREEDY)
    for i, prompt in enumerate(PROMPTS):
        alone = engine.generate([prompt], 1, GREEDY)
        for row in range(3 * i, 3 * i + 3):
            assert torch.equal(greedy.completion_ids[row], alone.completion_ids[0])


def test_greedy_matches_model_generate(tiny) -> None:
    model, tokenizer = tiny
    rollouts = TransformersGenerator(model, tokenizer).generate(PROMPTS, 1, GREEDY)
    batch = tokenizer(PROMPTS, padding=True, return_tensors="pt", add_special_tokens=False)
    reference = model.generate(
        **batch, do_sample=False, max_new_tokens=10, pad_token_id=tokenizer.pad_token_id
    )
    assert torch.equal(rollouts.prompt_ids, batch["input_ids"])
    assert torch.equal(rollouts.completion_ids, reference[:, batch["input_ids"].shape[1] :])
    assert rollouts.truncated.all() and rollouts.completion_mask.all()


def test_seed_reproduces_rollouts(tiny) -> None:
    model, tokenizer = tiny
    engine = TransformersGenerator(model, tokenizer)
    state = torch.get_rng_state()
    first = engine.generate(PROMPTS, 3, SamplingParams(max_new_tokens=8, seed=11))
    second = engine.generate(PROMPTS, 3, SamplingParams(max_new_tokens=8, seed=11))
    other = engine.generate(PROMPTS, 3, SamplingParams(max_new_tokens=8, seed=12))
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is not used
    assert torch.equal(first.completion_ids, second.completion_ids)
    assert first.texts == second.texts
    assert not torch.equal(first.completion_ids, other.completion_ids)
    # Samples of one prompt differ from each other (temperature 1 over 49k tokens).
    assert len({tuple(row.tolist()) for row in first.completion_ids[:3]}) == 3


def test_eos_stops_a_row_and_the_mask_ends_on_it(tiny) -> None:
    model, tokenizer = tiny
    free = TransformersGenerator(model, tokenizer).generate(PROMPTS, 1, GREEDY)
    # Declare the greedy token at step 3 of row 0 an EOS: row 0 must stop on its first
    # occurrence, the other rows only if they produce it too.
    stop = int(free.completion_ids[0, 3])
    engine = TransformersGenerator(model, tokenizer, eos_token_ids=[stop])
    stopped = engine.generate(PROMPTS, 1, GREEDY)
    for row in range(3):
        tokens = free.completion_ids[row].tolist()
        length = tokens.index(stop) + 1 if stop in tokens else len(tokens)
        assert stopped.completion_mask[row].tolist() == [1] * length + [0] * (10 - length)
        assert stopped.completion_ids[row, :length].tolist() == tokens[:length]
        assert (stopped.completion_ids[row, length:] == tokenizer.pad_token_id).all()
        assert bool(stopped.truncated[row]) == (stop not in tokens)
    assert stopped.completion_mask[0].sum() <= 4 and not stopped.truncated[0]


def test_rows_end_at_first_eos_or_are_truncated_when_sampling(tiny) -> None:
    model, tokenizer = tiny
    engine = TransformersGenerator(model, tokenizer, batch_size=16, eos_token_ids=MANY_EOS)
    rollouts = engine.generate(PROMPTS, 8, SamplingParams(max_new_tokens=24, seed=3))
    eos = torch.tensor(MANY_EOS)
    lengths = rollouts.completion_lengths
    assert rollouts.truncated.any() and (~rollouts.truncated).any()
    for row in range(len(rollouts)):
        ids = rollouts.completion_ids[row, : lengths[row]]
        is_eos = torch.isin(ids, eos)
        # The mask is a prefix of ones; EOS (if any) is its last token and appears nowhere before.
        assert rollouts.completion_mask[row, : lengths[row]].all()
        assert not rollouts.completion_mask[row, lengths[row] :].any()
        assert not is_eos[:-1].any()
        assert bool(rollouts.truncated[row]) == (not is_eos[-1] and int(lengths[row]) == 24)
    assert int(lengths.max()) == rollouts.completion_ids.shape[1]


def test_finished_rows_dropping_out_changes_no_row(tiny) -> None:
    # Rows stop at different steps and the batch shrinks mid-way; each row must still be what
    # its prompt gives when generated alone.
    model, tokenizer = tiny
    prompts = [*PROMPTS, "a b c", "The cat sat on the", "12345", "Why?", "Long prompt " * 5]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=30)
    free = TransformersGenerator(model, tokenizer).generate(prompts, 1, sampling)
    # The tiny model's greedy rows repeat a token, some switching to another one later; those
    # later tokens become the EOS set, so the rows that switch stop there.
    first = set(free.completion_ids[:, 0].tolist())
    eos = sorted(set(free.completion_ids[:, 1:].flatten().tolist()) - first)
    engine = TransformersGenerator(model, tokenizer, eos_token_ids=eos)
    together = engine.generate(prompts, 1, sampling)
    lengths = together.completion_lengths
    assert 4 * int((lengths < 30).sum()) >= len(prompts) and lengths.max() == 30
    for i, prompt in enumerate(prompts):
        alone = engine.generate([prompt], 1, sampling)
        assert alone.completion_ids[0].tolist() == together.completion_ids[i, : lengths[i]].tolist()


def test_texts_decode_the_masked_ids(tiny) -> None:
    model, tokenizer = tiny
    engine = TransformersGenerator(model, tokenizer, eos_token_ids=MANY_EOS)
    rollouts = engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=12, seed=1))
    for row, text in enumerate(rollouts.texts):
        ids = rollouts.completion_ids[row][rollouts.completion_mask[row].bool()].tolist()
        assert text == tokenizer.decode(ids, skip_special_tokens=True)


def test_model_inputs_reproduce_the_sampling_logits(tiny) -> None:
    model, tokenizer = tiny
    rollouts = TransformersGenerator(model, tokenizer).generate(PROMPTS, 2, GREEDY)
    rows = torch.tensor([5, 0, 3])
    inputs = rollouts.model_inputs(rows)
    start = inputs.completion_start
    assert start == rollouts.prompt_ids.shape[1]
    assert torch.equal(inputs.input_ids[:, :start], rollouts.prompt_ids[[2, 0, 1]])
    assert torch.equal(inputs.input_ids[:, start:], rollouts.completion_ids[rows])
    assert torch.equal(inputs.attention_mask[:, start:], rollouts.completion_mask[rows])
    input_ids, attention_mask, _ = rollouts.model_inputs()  # unpacks as a 3-tuple
    assert input_ids.shape == (6, start + 10) and attention_mask.shape == input_ids.shape
    # Teacher forcing the greedy completions: the logits in columns start-1 .. start+T-2 pick
    # exactly the generated tokens.
    with torch.no_grad():
        logits = model(
            input_ids=inputs.input_ids,
            attention_mask=inputs.attention_mask,
            position_ids=inputs.position_ids,
        ).logits
    predicted = logits[:, start - 1 : -1].argmax(-1)
    assert torch.equal(predicted, rollouts.completion_ids[rows])


def test_peft_model_and_train_mode_restored(tiny) -> None:
    model, tokenizer = load_model("tiny-random", seed=0)
    base = TransformersGenerator(model, tokenizer).generate(PROMPTS, 2, GREEDY)
    peft = attach_lora(model, LoraSettings(r=4))
    peft.train()
    rollouts = TransformersGenerator(peft, tokenizer, progress=True).generate(PROMPTS, 2, GREEDY)
    assert peft.training
    assert torch.equal(rollouts.completion_ids, base.completion_ids)  # fresh adapter: B = 0


def test_bad_arguments(tiny) -> None:
    model, tokenizer = tiny
    engine = TransformersGenerator(model, tokenizer)
    with pytest.raises(ValueError, match="non-empty list"):
        engine.generate([], 2, GREEDY)
    with pytest.raises(ValueError, match="non-empty list"):
        engine.generate("a prompt", 2, GREEDY)
    with pytest.raises(ValueError, match="n \\(samples per prompt\\)"):
        engine.generate(PROMPTS, 0, GREEDY)
    with pytest.raises(ValueError, match="encode to no tokens"):
        engine.generate(["ok", ""], 1, GREEDY)
    with pytest.raises(ValueError, match="batch_size"):
        TransformersGenerator(model, tokenizer, batch_size=0)
    with pytest.raises(ValueError, match="inconsistent Rollouts"):
        Rollouts(
            prompt_ids=torch.zeros(2, 3, dtype=torch.long),
            prompt_mask=torch.ones(2, 3, dtype=torch.long),
            completion_ids=torch.zeros(3, 4, dtype=torch.long),
            completion_mask=torch.ones(3, 4, dtype=torch.long),
            texts=["", "", ""],
            truncated=torch.zeros(3, dtype=torch.bool),
            group_size=2,
        )


def test_preallocated_cache_layer_equals_dynamic_layer() -> None:
    from transformers.cache_utils import DynamicLayer

    from groupwise.rollout.transformers_engine import _PreallocatedLayer

    torch.manual_seed(0)
    plain, preallocated = DynamicLayer(), _PreallocatedLayer(reserve=3)
    # prompt, repeat for the group, 4 decode steps (past the reserve), drop rows, 2 more steps
    script = [
        ("update", 5),
        ("repeat", 2),
        ("update", 1),
        ("update", 1),
        ("update", 1),
        ("update", 1),
        ("select", torch.tensor([0, 3])),
        ("update", 1),
        ("update", 1),
    ]
    rows = 2
    for op, arg in script:
        if op == "update":
            k, v = torch.randn(rows, 3, arg, 4), torch.randn(rows, 3, arg, 4)
            expected = plain.update(k, v)
            got = preallocated.update(k.clone(), v.clone())
            for e, g in zip(expected, got, strict=True):
                assert torch.equal(e, g)
        elif op == "repeat":
            plain.batch_repeat_interleave(arg)
            preallocated.batch_repeat_interleave(arg)
            rows *= arg
        else:
            plain.batch_select_indices(arg)
            preallocated.batch_select_indices(arg)
            rows = len(arg)
        assert preallocated.get_seq_length() == plain.get_seq_length()
