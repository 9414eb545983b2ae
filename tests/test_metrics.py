"""pass@k and its bootstrap table (docs/algorithms.md §4)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from groupwise.metrics import bootstrap_interval, mean_interval, pass_at_k, pass_at_k_table

# --- pass_at_k ------------------------------------------------------------------------------


def test_pass_at_k_hand_computed():
    # n = 8, c = 3, k = 2: 1 - C(5,2)/C(8,2) = 1 - 10/28; product form
    # 1 - (1 - 2/6)(1 - 2/7)(1 - 2/8) = 1 - (4/6)(5/7)(6/8) = 1 - 120/336 = 1 - 10/28
    assert pass_at_k(8, 3, 2) == pytest.approx(1 - 10 / 28, rel=1e-15)
    # pass@1 is the accuracy c/n; c = 0 gives 0; n - c < k gives 1
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16, rel=1e-15)
    assert pass_at_k(8, 0, 4) == 0.0
    assert pass_at_k(8, 5, 4) == 1.0
    assert isinstance(pass_at_k(8, 3, 2), float)


def test_pass_at_k_equals_brute_force_over_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            samples = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(samples, k))
                brute = sum(any(subset) for subset in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_pass_at_k_exact_at_n_1024():
    n = 1024
    cs = [0, 1, 2, 7, 100, 512, 900, 1000, 1020, 1024]
    ks = [1, 2, 4, 16, 100, 512, 1000, 1024]
    got = pass_at_k(n, np.array(cs)[:, None], np.array(ks)[None, :])
    assert got.shape == (len(cs), len(ks))
    for a, c in enumerate(cs):
        for b, k in enumerate(ks):
            exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
            assert math.isclose(got[a, b], float(exact), rel_tol=1e-12, abs_tol=1e-15), (c, k)


def test_pass_at_k_broadcasts():
    got = pass_at_k(np.array([8, 8, 16]), np.array([0, 8, 5]), 4)
    # 16, 5, 4: 1 - C(11,4)/C(16,4) = 1 - 330/1820
    np.testing.assert_allclose(got, [0.0, 1.0, 1 - 330 / 1820], rtol=1e-14)


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (8, 3, 9, "1 <= k <= n"),
        (8, 3, 0, "1 <= k <= n"),
        (8, 9, 2, "0 <= c <= n"),
        (8, -1, 2, "0 <= c <= n"),
        (0, 0, 1, "n >= 1"),
        (8, 2.5, 2, "c must hold integers"),
    ],
)
def test_pass_at_k_errors(n, c, k, message):
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


# --- pass_at_k_table ----------------------------------------------------------------------


def test_pass_at_k_table_hand_computed():
    table = pass_at_k_table({"gsm8k": [0, 4, 8]}, n=8, ks=[1, 2], bootstrap=200)
    row = table["gsm8k"]
    assert row["n"] == 8 and row["problems"] == 3
    # pass@1: mean(0/8, 4/8, 8/8) = 0.5
    assert row["pass@1"] == pytest.approx(0.5)
    # pass@2: c = 4 -> 1 - C(4,2)/C(8,2) = 1 - 6/28; mean(0, 22/28, 1) = (50/28) / 3
    assert row["pass@2"] == pytest.approx(50 / 84)
    for k in (1, 2):
        low, high = row[f"pass@{k}_ci"]
        assert 0.0 <= low <= row[f"pass@{k}"] <= high <= 1.0
    assert list(row) == ["n", "problems", "pass@1", "pass@1_ci", "pass@2", "pass@2_ci"]


def test_pass_at_k_table_bootstrap_is_the_percentile_interval():
    counts = [0, 1, 3, 8, 8, 2, 0, 5, 6, 7]
    row = pass_at_k_table(counts, n=8, ks=[1], confidence=0.9, bootstrap=500, seed=3)
    # the same computation written out: 500 resamples of the 10 problems, 5 % and 95 % points
    rng = np.random.default_rng(3)
    values = np.array(counts) / 8
    means = values[rng.integers(0, 10, size=(500, 10))].mean(axis=1)
    np.testing.assert_allclose(row["pass@1_ci"], np.quantile(means, [0.05, 0.95]), rtol=1e-12)


def test_bootstrap_interval_draws_one_resample_after_another_whatever_the_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = np.random.default_rng(0).random(7)
    whole = mean_interval(values, confidence=0.8, bootstrap=300, seed=4)
    rng = np.random.default_rng(4)
    means = [values[rng.integers(0, 7, size=7)].mean() for _ in range(300)]
    np.testing.assert_allclose(whole, np.quantile(means, [0.1, 0.9]), rtol=1e-12)
    monkeypatch.setattr("groupwise.metrics._BOOTSTRAP_BLOCK", 7 * 11)  # blocks of 11 resamples
    np.testing.assert_array_equal(mean_interval(values, 0.8, 300, 4), whole)


def test_bootstrap_interval_shapes_and_undefined_resamples() -> None:
    # [2, 3] statistics per resample: the interval is [2, 3, 2]
    table = np.arange(6.0).reshape(2, 3, 1) + np.arange(4.0)  # [2, 3, P = 4]
    interval = mean_interval(table, bootstrap=50)
    assert interval.shape == (2, 3, 2) and np.all(interval[..., 0] <= interval[..., 1])

    def first_or_nan(index: np.ndarray) -> np.ndarray:
        # defined only where the resample's first draw is problem 0
        return np.where(index[:, 0] == 0, index.mean(axis=1), np.nan)

    low, high = bootstrap_interval(first_or_nan, 3, bootstrap=200)
    rng = np.random.default_rng(0)
    draws = rng.integers(0, 3, size=(200, 3))
    kept = draws[draws[:, 0] == 0].mean(axis=1)
    np.testing.assert_allclose([low, high], np.quantile(kept, [0.025, 0.975]), rtol=1e-12)
    never = bootstrap_interval(lambda index: np.full(index.shape[0], np.nan), 3, bootstrap=5)
    assert np.isnan(never).all() and never.shape == (2,)
    with pytest.raises(ValueError, match="interval confidence must lie in"):
        mean_interval([1.0], confidence=1.0)
    with pytest.raises(ValueError, match="finite numbers"):
        mean_interval([1.0, float("nan")])


def test_pass_at_k_table_deterministic_and_independent_per_benchmark():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 9, 50).tolist(), rng.integers(0, 9, 30).tolist()
    both = pass_at_k_table({"a": a, "b": b}, 8, [1, 4], seed=7)
    again = pass_at_k_table({"a": a, "b": b}, 8, [1, 4], seed=7)
    alone = pass_at_k_table({"b": b}, 8, [1, 4], seed=7)
    assert both == again
    assert both["b"] == alone["b"]
    assert pass_at_k_table(b, 8, [1, 4], seed=7) == alone["b"]
    assert pass_at_k_table(b, 8, [1, 4], seed=8)["pass@1_ci"] != alone["b"]["pass@1_ci"]


def test_pass_at_k_table_interval_width_matches_theory():
    # 400 problems, each solved by 0 or all 8 samples with a fair coin: the mean pass@1 has
    # standard error sqrt(0.25 / 400) = 0.025, so a 95 % interval is ~ 2 * 1.96 * 0.025 wide
    counts = (np.random.default_rng(0).integers(0, 2, 400) * 8).tolist()
    low, high = pass_at_k_table(counts, 8, [1])["pass@1_ci"]
    assert high - low == pytest.approx(2 * 1.96 * 0.025, rel=0.15)


def test_pass_at_k_table_errors():
    with pytest.raises(ValueError, match=r"ks must be a non-empty list of ints in \[1, n=8\]"):
        pass_at_k_table([1, 2], 8, [1, 16])
    with pytest.raises(ValueError, match=r"correct counts of aime must lie in \[0, n=8\]"):
        pass_at_k_table({"aime": [1, 9]}, 8, [1])
    with pytest.raises(ValueError, match="correct counts of aime must be a non-empty list"):
        pass_at_k_table({"aime": []}, 8, [1])
    with pytest.raises(ValueError, match="confidence must lie in"):
        pass_at_k_table([1], 8, [1], confidence=95)
    with pytest.raises(ValueError, match="bootstrap must be an int >= 1"):
        pass_at_k_table([1], 8, [1], bootstrap=0)
