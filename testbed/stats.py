"""Statistics of the learning testbed (testbed/learning.py): each method's difference to GRPO
with a 95 % interval, paired over training seeds and bootstrapped over held-out problems.

Every method is trained with the same seeds and evaluated on the same problems with the same
sampling seeds, so differences are paired twice:

- over seeds: d_s = pass@k(method, seed s) - pass@k(GRPO, seed s); the interval is Student's t
  over the S differences (mean +- t_{0.975, S-1} sd / sqrt(S)). It holds the training noise
  (what another seed would give) and, at the evaluated problems, their sampling noise.
- over problems: d_p = mean over seeds of [pass@k(method, seed s, problem p) - pass@k(GRPO,
  seed s, problem p)]; the problems are resampled with replacement and the mean of d_p
  recomputed (the package's percentile bootstrap, groupwise.metrics.mean_interval). It holds
  the evaluation noise (which problems were drawn) with the seeds fixed.

A difference is called distinguishable from zero when both intervals exclude zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from groupwise.metrics import mean_interval

CONFIDENCE = 0.95


def student_t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with `df` >= 1 degrees of freedom (Simpson's rule on the
    density from 0 to |x|, 4096 intervals: error below 1e-9 for |x| <= 100)."""
    if df < 1:
        raise ValueError(f"student_t_cdf needs df >= 1, got {df}")
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    grid = np.linspace(0.0, abs(x), 4097)
    density = np.exp(log_norm - (df + 1) / 2 * np.log1p(grid**2 / df))
    step = grid[1] - grid[0]
    area = (
        step
        / 3
        * (density[0] + density[-1] + 4 * density[1:-1:2].sum() + 2 * density[2:-1:2].sum())
    )
    return 0.5 + math.copysign(float(area), x)


def student_t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom, p in (0.5, 1) (bisection on
    student_t_cdf to 1e-10)."""
    if not 0.5 < p < 1.0:
        raise ValueError(f"student_t_quantile needs p in (0.5, 1), got {p}")
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        high *= 2
    while high - low > 1e-10:
        mid = (low + high) / 2
        low, high = (mid, high) if student_t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def paired_seed_interval(
    differences: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of per-seed paired differences and its two-sided Student-t
    interval, mean +- t_{(1+confidence)/2, S-1} * sd / sqrt(S) (sd with S - 1). Needs S >= 2."""
    d = np.asarray(differences, dtype=float)
    if d.ndim != 1 or d.size < 2:
        raise ValueError(f"paired_seed_interval needs at least 2 differences, got {d.size}")
    mean = float(d.mean())
    half = student_t_quantile((1 + confidence) / 2, d.size - 1) * float(d.std(ddof=1))
    half /= math.sqrt(d.size)
    return mean, mean - half, mean + half


def seeds_needed(
    differences: Sequence[float], confidence: float = CONFIDENCE, most: int = 1000
) -> int | None:
    """The fewest seeds S >= 2 at which the paired-seed t interval of a difference with the
    measured mean and sd (of the per-seed `differences`, sd with S - 1) would exclude zero:
    t_{(1+confidence)/2, S-1} * sd / sqrt(S) < |mean|. None where the mean is zero or more
    than `most` seeds would be needed. A planning number: it takes the measured mean and sd
    as the true ones. Needs at least 2 differences."""
    d = np.asarray(differences, dtype=float)
    if d.ndim != 1 or d.size < 2:
        raise ValueError(f"seeds_needed needs at least 2 differences, got {d.size}")
    mean, sd = abs(float(d.mean())), float(d.std(ddof=1))
    if mean == 0:
        return None
    for seeds in range(2, most + 1):
        if student_t_quantile((1 + confidence) / 2, seeds - 1) * sd / math.sqrt(seeds) < mean:
            return seeds
    return None


def problem_bootstrap_interval(
    per_problem: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = 4000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(mean, low, high): the mean over problems of per-problem paired differences and its
    groupwise.metrics.mean_interval over `resamples` resamples of the problems seeded with
    `seed`."""
    d = np.asarray(per_problem, dtype=float)
    if d.ndim != 1 or d.size < 1:
        raise ValueError("problem_bootstrap_interval needs a non-empty list of differences")
    low, high = mean_interval(d, confidence, resamples, seed)
    return float(d.mean()), float(low), float(high)


def difference_to_reference(
    method: np.ndarray, reference: np.ndarray, confidence: float = CONFIDENCE
) -> dict[str, float]:
    """A method's difference to the reference (GRPO) from per-seed, per-problem scores.

    method, reference: [S, P] arrays (seed s, problem p) of a per-problem score (pass@k), the
    same seeds in the same order and the same problems. Returns {"mean", "seed_low",
    "seed_high", "problem_low", "problem_high", "distinguishable"}: the mean difference, its
    paired-seed t interval (NaN with one seed), its problem bootstrap interval, and whether
    both intervals exclude zero (1.0 or 0.0; with one seed only the bootstrap decides).
    """
    method, reference = np.asarray(method, float), np.asarray(reference, float)
    if method.shape != reference.shape or method.ndim != 2:
        raise ValueError(
            f"method and reference must be [seeds, problems] arrays of one shape, "
            f"got {method.shape} and {reference.shape}"
        )
    diff = method - reference
    if diff.shape[0] >= 2:
        mean, seed_low, seed_high = paired_seed_interval(diff.mean(axis=1), confidence)
    else:
        mean, seed_low, seed_high = float(diff.mean()), math.nan, math.nan
    _, problem_low, problem_high = problem_bootstrap_interval(diff.mean(axis=0), confidence)
    excludes = [problem_low > 0 or problem_high < 0]
    if not math.isnan(seed_low):
        excludes.append(seed_low > 0 or seed_high < 0)
    return {
        "mean": mean,
        "seed_low": seed_low,
        "seed_high": seed_high,
        "problem_low": problem_low,
        "problem_high": problem_high,
        "distinguishable": float(all(excludes)),
    }
