"""The statistical tests of the engine agreement tests (tests/vllm_support: the paired
permutation test and the goodness-of-fit test): under the null hypothesis they reject at about
the nominal rate, and they detect a difference the size of the ones they are meant to catch."""

from __future__ import annotations

import numpy as np
from vllm_support import goodness_of_fit_p_value, permutation_p_value


def test_permutation_test_holds_its_level_and_has_power() -> None:
    rng = np.random.default_rng(0)
    null_binary, null_real = [], []
    for trial in range(200):
        rates = rng.uniform(0.0, 0.6, 16)
        null_binary.append(
            permutation_p_value(
                [rng.binomial(1, q, 6) for q in rates],
                [rng.binomial(1, q, 6) for q in rates],
                rounds=2000,
                seed=trial,
            )
        )
        means = rng.normal(-0.8, 0.3, 16)
        null_real.append(
            permutation_p_value(
                [rng.normal(m, 0.2, 6) for m in means],
                [rng.normal(m, 0.2, 6) for m in means],
                rounds=2000,
                seed=trial,
            )
        )
    for p_values in (np.array(null_binary), np.array(null_real)):
        assert 0.01 <= np.mean(p_values < 0.05) <= 0.10  # nominal 0.05, 200 trials
    # continuous values: uniform p-values (discrete ones are conservative, never liberal)
    assert 0.35 <= np.mean(np.array(null_real) < 0.5) <= 0.65
    # a shift of 0.15 nats in mean log-prob (sd 0.2 per sample), 16 problems x 6 samples
    means = rng.normal(-0.8, 0.3, 16)
    shifted = permutation_p_value(
        [rng.normal(m, 0.2, 6) for m in means], [rng.normal(m + 0.15, 0.2, 6) for m in means]
    )
    assert shifted < 1e-3
    # identical samples: the largest p-value there is
    same = [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    assert permutation_p_value(same, same, rounds=500) == 1.0


def test_goodness_of_fit_holds_its_level_and_has_power() -> None:
    rng = np.random.default_rng(0)
    probs = dict(enumerate(rng.dirichlet(np.full(26, 0.3))))
    p = np.array(list(probs.values()))
    null = [
        goodness_of_fit_p_value(
            dict(enumerate(rng.multinomial(1000, p))), probs, rounds=2000, seed=trial
        )
        for trial in range(200)
    ]
    assert 0.01 <= np.mean(np.array(null) < 0.05) <= 0.10
    # the same logits at temperature 1.0 instead of 0.8: p ** (0.8 / 1.0), renormalised
    warmer = p**0.8 / (p**0.8).sum()
    assert goodness_of_fit_p_value(dict(enumerate(rng.multinomial(1000, warmer))), probs) < 1e-3
    # an outcome the distribution does not have
    assert goodness_of_fit_p_value({0: 999, 99: 1}, probs) == 0.0
