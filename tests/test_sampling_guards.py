"""Non-finite values stop sampling and training with a clear error: the
sampler refuses logits that define no distribution instead of returning token id V (which
crashed the next embedding lookup) or token 0 at temperature 0; check_finite is the trainer's
guard for losses and gradient norms."""

from __future__ import annotations

import math

import pytest
import torch

from groupwise.errors import NonFiniteError, check_finite
from groupwise.models import load_model
from groupwise.rollout import SamplingParams, TransformersGenerator, sample_next_tokens

SAMPLE = SamplingParams(temperature=1.0)
NUCLEUS = SamplingParams(temperature=0.7, top_p=0.9)
GREEDY = SamplingParams(temperature=0.0)
ALL_MODES = [SAMPLE, NUCLEUS, GREEDY]
V = 50


def sound_logits(rows: int = 4) -> torch.Tensor:
    return torch.randn(rows, V, generator=torch.Generator().manual_seed(0))


def draw(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    return sample_next_tokens(logits, sampling, torch.Generator().manual_seed(1))


@pytest.mark.parametrize("sampling", ALL_MODES, ids=["sample", "top_p", "greedy"])
@pytest.mark.parametrize(
    ("poison", "detail"),
    [
        (float("nan"), "NaN in 1 of 4 rows"),
        (float("inf"), r"\+inf in 1 of 4 rows"),
    ],
)
def test_a_nan_or_inf_logit_raises(sampling: SamplingParams, poison: float, detail: str) -> None:
    logits = sound_logits()
    logits[2, 7] = poison
    with pytest.raises(NonFiniteError, match=rf"non-finite logits \({detail}\)"):
        draw(logits, sampling)


@pytest.mark.parametrize("sampling", ALL_MODES, ids=["sample", "top_p", "greedy"])
def test_an_all_nan_batch_raises_where_main_returned_token_v_or_0(
    sampling: SamplingParams,
) -> None:
    # The diverged policy of the issue: every logit NaN. The old sampler returned V (sampling)
    # or 0 (greedy) for every row.
    logits = torch.full((3, V), float("nan"))
    with pytest.raises(NonFiniteError, match="NaN in 3 of 3 rows") as caught:
        draw(logits, sampling)
    assert caught.value.what.startswith("logits") and caught.value.step is None
    assert "learning rate" in caught.value.hint


@pytest.mark.parametrize("sampling", ALL_MODES, ids=["sample", "top_p", "greedy"])
def test_a_row_of_only_minus_inf_raises(sampling: SamplingParams) -> None:
    logits = sound_logits()
    logits[0] = float("-inf")
    with pytest.raises(NonFiniteError, match="only -inf in 1 of 4 rows"):
        draw(logits, sampling)


@pytest.mark.parametrize("sampling", ALL_MODES, ids=["sample", "top_p", "greedy"])
def test_some_minus_inf_is_a_probability_zero_not_an_error(sampling: SamplingParams) -> None:
    logits = sound_logits(rows=2000 if sampling.temperature else 4)
    banned = torch.arange(0, V, 2)  # every even token id has probability 0
    logits[:, banned] = float("-inf")
    tokens = draw(logits, sampling)
    assert (tokens % 2 == 1).all()
    assert ((tokens >= 0) & (tokens < V)).all()


def test_overflow_after_the_temperature_is_named() -> None:
    logits = torch.zeros(2, V)
    logits[1, 3] = 3e38  # finite in float32; / 0.1 is +inf
    with pytest.raises(NonFiniteError, match="overflow once divided by the temperature"):
        draw(logits, SamplingParams(temperature=0.1))
    assert int(draw(logits, GREEDY)[1]) == 3  # greedy does not divide: the row is sound


def test_generate_with_nan_weights_raises_at_the_first_token() -> None:
    # A diverged policy: NaN weights make NaN logits from the prompt's own forward pass on. The
    # old engine fed token id V back into the embedding (IndexError at the second token).
    model, tokenizer = load_model("tiny-random", seed=0)
    with torch.no_grad():
        model.get_output_embeddings().weight[5].fill_(float("nan"))
    generator = TransformersGenerator(model, tokenizer, batch_size=8)
    for sampling in (SamplingParams(max_new_tokens=4, seed=0), SamplingParams(0.0, 1.0, 4)):
        with pytest.raises(
            NonFiniteError,
            match=r"logits \(NaN in 6 of 6 rows\) at completion "
            r"token 1",
        ):
            generator.generate(["Hello", "What is 2+3?"], 3, sampling)


def test_check_finite_passes_finite_values_and_names_the_bad_one() -> None:
    check_finite(0.5, "policy loss", step=3)
    check_finite(torch.tensor([1.0, -2.0]), "gradient", step=3)
    with pytest.raises(NonFiniteError) as caught:
        check_finite(torch.tensor(float("inf")), "gradient norm", step=7, hint="lower optim.lr")
    error = caught.value
    assert (error.what, error.step, error.hint) == ("gradient norm (inf)", 7, "lower optim.lr")
    assert str(error) == "step 7: non-finite gradient norm (inf); lower optim.lr"
    with pytest.raises(NonFiniteError, match=r"^non-finite policy loss \(nan\)$"):
        check_finite(math.nan, "policy loss")
    with pytest.raises(NonFiniteError, match=r"step 2: non-finite weights \(some elements\)"):
        check_finite(torch.tensor([1.0, math.nan]), "weights", step=2)


def test_at_step_locates_a_sampler_error_in_training() -> None:
    error = NonFiniteError("logits (NaN in 8 of 8 rows) at completion token 1", hint="diverged")
    located = error.at_step(12, hint="lower optim.lr (now 1e+10)")
    assert str(located) == (
        "step 12: non-finite logits (NaN in 8 of 8 rows) at completion token 1; lower optim.lr "
        "(now 1e+10)"
    )
    assert (located.what, located.step) == (error.what, 12)
    assert error.at_step(3).hint == "diverged"  # no new hint: its own stays
