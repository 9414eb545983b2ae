"""Evaluation metrics: unbiased pass@k, and the percentile bootstrap over problems that every
interval of the package is drawn with (`bootstrap_interval`; pass@k, calibration, held-out
accuracy and its difference, the testbed's differences).

docs/algorithms.md §4 (pass@k, Chen et al. 2021). The conditional perplexity of the analyses is
exp(-mean_logp) of groupwise.completion_logprobs.completion_mean_logp
(groupwise.analysis.perplexity).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np

# Bootstrap resamples are drawn in blocks of at most this many problem indices, to bound memory.
_BOOTSTRAP_BLOCK = 1 << 22


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _as_int_array(values: Any, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == np.floor(array)):
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got {values!r}")
    return array.astype(np.int64)


def _pass_at_k_scalar(n: int, c: int, k: int) -> float:
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k(n: Any, c: Any, k: Any) -> float | np.ndarray:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k) (docs/algorithms.md §4).

    Computed in the stable product form 1 - prod_{i=n-c+1}^{n} (1 - k/i), in float64: a
    relative error of order c * 1e-16, so exact to ~1e-13 for n up to thousands.

    Args:
        n: samples per problem (>= 1); scalar or array.
        c: correct samples among them (0 <= c <= n); scalar or array.
        k: 1 <= k <= n; scalar or array. n, c and k broadcast like numpy arrays.

    Returns:
        probability in [0, 1] that at least one of k samples drawn without replacement is
        correct: a float for scalar inputs, else a float64 array of the broadcast shape.
    """
    n_arr, c_arr, k_arr = np.broadcast_arrays(
        _as_int_array(n, "n"), _as_int_array(c, "c"), _as_int_array(k, "k")
    )
    if np.any(n_arr < 1):
        raise ValueError(f"pass_at_k needs n >= 1, got n={n!r}")
    if np.any(c_arr < 0) or np.any(c_arr > n_arr):
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got c={c!r}, n={n!r}")
    if np.any(k_arr < 1) or np.any(k_arr > n_arr):
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got k={k!r}, n={n!r}")
    shape = n_arr.shape
    triples = np.stack([n_arr.ravel(), c_arr.ravel(), k_arr.ravel()])
    # Many problems share (n, c, k): compute each distinct triple once.
    unique, inverse = np.unique(triples, axis=1, return_inverse=True)
    values = np.array([_pass_at_k_scalar(*map(int, col)) for col in unique.T], dtype=np.float64)
    result = values[inverse.reshape(-1)].reshape(shape)
    return float(result) if result.ndim == 0 else result


def bootstrap_interval(
    statistic: Callable[[np.ndarray], np.ndarray],
    problems: int,
    confidence: float = 0.95,
    bootstrap: int = 1000,
    seed: int = 0,
) -> np.ndarray:
    """Percentile bootstrap interval of a statistic over problems (docs/algorithms.md §4): the
    one resampling every interval of the package uses.

    What is resampled: the problems, `bootstrap` times, each resample P = `problems` indices
    drawn with replacement (a problem's samples or completions stay together). The draws: a
    numpy Generator seeded with `seed` draws resample r's indices as
    `rng.integers(0, P, size=P)`, for r = 0, 1, ... in turn; they are drawn in blocks of rows
    [rows, P] to bound memory, which gives the same indices as one resample at a time.

    Args:
        statistic: index -> values: index is a block of resamples, int64 [rows, P]; values is
            the statistic on each of them, float [*S, rows] (S any leading shape, () for one
            number per resample). NaN marks a resample where the statistic is undefined.
        problems: P >= 1.
        confidence: interval coverage in (0, 1).
        bootstrap: number of resamples, >= 1.
        seed: seed of the resampling.

    Returns:
        float64 [*S, 2]: the (1 - confidence)/2 and 1 - (1 - confidence)/2 quantiles (numpy's
        default "linear" method) of the statistic over the resamples where it is defined;
        NaN where it is defined in none.
    """
    if not _is_int(problems) or problems < 1:
        raise ValueError(f"bootstrap_interval needs problems >= 1, got {problems!r}")
    if not _is_int(bootstrap) or bootstrap < 1:
        raise ValueError(f"bootstrap must be an int >= 1, got {bootstrap!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"interval confidence must lie in (0, 1), got {confidence!r}")
    rng = np.random.default_rng(seed)
    rows_per_block = max(1, _BOOTSTRAP_BLOCK // problems)
    blocks = []
    for start in range(0, bootstrap, rows_per_block):
        rows = min(rows_per_block, bootstrap - start)
        blocks.append(np.asarray(statistic(rng.integers(0, problems, size=(rows, problems)))))
    values = np.concatenate(blocks, axis=-1)
    tail = (1.0 - confidence) / 2.0
    flat = values.reshape(-1, bootstrap)
    interval = np.full((flat.shape[0], 2), np.nan)
    for row, samples in enumerate(flat):
        defined = samples[~np.isnan(samples)]
        if defined.size:
            interval[row] = np.quantile(defined, [tail, 1.0 - tail])
    return interval.reshape(*values.shape[:-1], 2)


def mean_interval(
    per_problem: Any, confidence: float = 0.95, bootstrap: int = 1000, seed: int = 0
) -> np.ndarray:
    """`bootstrap_interval` of the mean over problems of per_problem [*S, P] (a number per
    problem on the last axis, finite): float64 [*S, 2]. A paired difference (two runs or two
    evaluations of the same problems) is the mean of the per-problem differences."""
    values = np.asarray(per_problem, dtype=np.float64)
    if values.ndim == 0 or values.shape[-1] == 0 or not np.all(np.isfinite(values)):
        raise ValueError("mean_interval needs a non-empty list of finite numbers, one per problem")

    def mean(index: np.ndarray) -> np.ndarray:
        return values[..., index].mean(axis=-1)

    return bootstrap_interval(mean, values.shape[-1], confidence, bootstrap, seed)


# Resamples of the problems for the interval of a difference; seeded, so it repeats exactly.
DIFFERENCE_BOOTSTRAP = 10_000


@dataclass(frozen=True)
class Difference:
    """after - before in accuracy (fractions) with its 95 % interval: a percentile bootstrap
    over problems, each problem's before and after kept together (paired): two evaluations of
    one run (groupwise.train.heldout) or of two runs on the same problems (groupwise report)."""

    before: float
    after: float
    low: float
    high: float

    @property
    def delta(self) -> float:
        return self.after - self.before


def accuracy_difference(
    before: Sequence[int], after: Sequence[int], n: int, confidence: float = 0.95
) -> Difference:
    """The difference in accuracy between two evaluations of the same problems with n samples
    each (correct counts per problem, in the same problem order) and its interval
    (`mean_interval` of the per-problem differences, DIFFERENCE_BOOTSTRAP resamples)."""
    if len(before) != len(after) or not before:
        raise ValueError(
            f"accuracy_difference: {len(before)} and {len(after)} problems; need the same "
            "non-empty problems in both evaluations"
        )
    diff = (np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)) / n
    low, high = mean_interval(diff, confidence, DIFFERENCE_BOOTSTRAP)
    return Difference(
        before=float(np.mean(before)) / n,
        after=float(np.mean(after)) / n,
        low=float(low),
        high=float(high),
    )


def _benchmark_table(
    counts: Sequence[int],
    n: int,
    ks: Sequence[int],
    confidence: float,
    bootstrap: int,
    seed: int,
    name: str,
) -> dict[str, Any]:
    correct = _as_int_array(list(counts), f"correct counts of {name}")
    if correct.ndim != 1 or correct.size == 0:
        raise ValueError(f"correct counts of {name} must be a non-empty list of integers")
    if np.any(correct < 0) or np.any(correct > n):
        raise ValueError(f"correct counts of {name} must lie in [0, n={n}]")
    per_problem = np.stack([pass_at_k(n, correct, k) for k in ks])  # [K, N]
    intervals = mean_interval(per_problem, confidence, bootstrap, seed)  # [K, 2]
    table: dict[str, Any] = {"n": n, "problems": correct.size}
    for row, k in enumerate(ks):
        table[f"pass@{k}"] = float(per_problem[row].mean())
        table[f"pass@{k}_ci"] = [float(intervals[row, 0]), float(intervals[row, 1])]
    return table


def pass_at_k_table(
    correct_counts: Mapping[str, Sequence[int]] | Sequence[int],
    n: int,
    ks: Sequence[int],
    confidence: float = 0.95,
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean pass@k over problems with a percentile bootstrap interval (docs/algorithms.md §4).

    For each benchmark and each k: the mean over problems of pass_at_k(n, c, k), and its
    `mean_interval` (`bootstrap` resamples of the problems seeded with `seed`). Every
    benchmark draws its own resamples from that seed, so its numbers do not depend on the
    other benchmarks and repeat exactly; all ks share the same resamples.

    Args:
        correct_counts: {benchmark: [c per problem]}, or one benchmark's [c per problem].
        n: samples per problem (the same for every problem).
        ks: values of k, each 1 <= k <= n.
        confidence: interval coverage in (0, 1).
        bootstrap: number of resamples, >= 1.
        seed: seed of the resampling.

    Returns:
        For a mapping: {benchmark: {"n": n, "problems": N, "pass@k": mean,
        "pass@k_ci": [low, high], ...}} (plain Python numbers, fractions in [0, 1], keys in
        the order of ks). For a plain sequence: the inner dict of that one benchmark.
    """
    if not _is_int(n) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    n = int(n)
    ks = list(ks)
    if not ks or any(not _is_int(k) or not 1 <= k <= n for k in ks):
        raise ValueError(f"ks must be a non-empty list of ints in [1, n={n}], got {ks!r}")
    ks = [int(k) for k in ks]
    if isinstance(correct_counts, Mapping):
        return {
            name: _benchmark_table(counts, n, ks, confidence, bootstrap, seed, name)
            for name, counts in correct_counts.items()
        }
    return _benchmark_table(correct_counts, n, ks, confidence, bootstrap, seed, "correct_counts")


def doubling_ks(n: int) -> list[int]:
    """The k of a pass@k table with n samples per problem: 1, 2, 4, ... up to n, and n (the
    held-out evaluation, the TRL callback and verl's validation report these)."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else [*ks, n]
