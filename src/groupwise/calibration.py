"""Calibration of verbalized confidences: coverage, Brier score, ECE (equal-mass and
equal-width bins), AUROC and over/under-confidence, each with a percentile bootstrap interval
over problems (docs/algorithms.md §6).

Pure functions over numpy arrays. Inputs, for N completions:
- confidence: float [N] in [0, 1], NaN (or None in a sequence) where the completion has no
  parsable confidence ("missing"). Missing ones are counted in the coverage and left out of
  every other figure, never replaced by 0.5 (the 0.5 of the AMIR reward is a reward rule).
- correct: {0, 1} (or bool) [N].
- problems: a problem id per completion [N] (any hashable values); the bootstrap resamples
  problems with replacement, a problem's completions together (as pass@k, docs/algorithms.md §4).

A figure that is undefined (no completion with a confidence; AUROC with one class) is NaN from
the point functions and None in the tables, and resamples where it is undefined are left out
of its interval.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from groupwise.metrics import bootstrap_interval

__all__ = [
    "BINNINGS",
    "DEFAULT_BINS",
    "FIGURES",
    "auroc",
    "bin_edges",
    "brier_score",
    "calibration_table",
    "confidence_array",
    "coverage",
    "expected_calibration_error",
    "overconfidence",
    "paired_calibration_table",
    "reliability_bins",
]

DEFAULT_BINS = 10
"""M, the number of ECE bins (docs/algorithms.md §6)."""

BINNINGS = ("quantile", "uniform")
"""The ECE binnings, named as scikit-learn's `calibration_curve` strategies: "quantile" =
equal-mass (edges at the m/M quantiles of the confidences), "uniform" = equal-width (m/M)."""


def confidence_array(values: Sequence[float | None] | np.ndarray) -> np.ndarray:
    """float64 [N] of the confidences, NaN where missing (None or NaN); raises ValueError
    naming the first value outside [0, 1]."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        array = values.astype(np.float64, copy=False).reshape(-1)
    else:
        array = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        array = array.reshape(-1)
    bad = ~np.isnan(array) & ((array < 0.0) | (array > 1.0))
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        raise ValueError(f"confidence[{index}] = {float(array[index])!r} is outside [0, 1]")
    return array


def _correct_array(values: Sequence[Any] | np.ndarray, size: int) -> np.ndarray:
    array = np.asarray(values).reshape(-1)
    if array.size != size:
        raise ValueError(f"correct has {array.size} values, confidence {size}")
    if array.size and not np.isin(array, (0, 1)).all():
        raise ValueError("correct must hold 0/1 (or booleans)")
    return array.astype(np.float64)


def _present(confidence: Any, correct: Any) -> tuple[np.ndarray, np.ndarray]:
    """(p, a) of the completions with a confidence."""
    p = confidence_array(confidence)
    a = _correct_array(correct, p.size)
    keep = ~np.isnan(p)
    return p[keep], a[keep]


def coverage(confidence: Any) -> float:
    """Share of completions with a parsable confidence, N / (number of completions); NaN
    for no completions."""
    p = confidence_array(confidence)
    return float(np.mean(~np.isnan(p))) if p.size else float("nan")


def brier_score(confidence: Any, correct: Any) -> float:
    """Brier = (1/N) sum_i (p_i - a_i)^2 over the N completions with a confidence (NaN if
    N = 0). In [0, 1], lower is better."""
    p, a = _present(confidence, correct)
    return float(np.mean((p - a) ** 2)) if p.size else float("nan")


def overconfidence(confidence: Any, correct: Any) -> float:
    """Mean confidence minus accuracy over the N completions with a confidence (NaN if N = 0):
    > 0 overconfident, < 0 underconfident."""
    p, a = _present(confidence, correct)
    return float(p.mean() - a.mean()) if p.size else float("nan")


def auroc(confidence: Any, correct: Any) -> float:
    """AUROC of confidence for correctness, the Mann-Whitney statistic: the probability that a
    correct completion has a higher confidence than an incorrect one, ties counted 1/2; over
    the completions with a confidence, NaN when they are all correct or all wrong."""
    return _auroc(*_present(confidence, correct))


def _auroc(p: np.ndarray, a: np.ndarray) -> float:
    """The AUROC of present confidences p [N] and correctness a [N] (checked arrays)."""
    positives = int(a.sum())
    negatives = p.size - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    # Mid-ranks (ties share the mean of their ranks) make the rank sum count ties one half.
    order = np.argsort(p, kind="stable")
    sorted_p = p[order]
    starts = np.flatnonzero(np.r_[True, sorted_p[1:] != sorted_p[:-1]])
    ends = np.r_[starts[1:], p.size]
    midrank = np.repeat((starts + ends + 1) / 2.0, ends - starts)  # 1-based mean rank per tie run
    ranks = np.empty(p.size)
    ranks[order] = midrank
    rank_sum = ranks[a == 1].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))


def bin_edges(confidence: Any, bins: int = DEFAULT_BINS, strategy: str = "quantile") -> np.ndarray:
    """The M + 1 bin edges e_0 <= ... <= e_M (float64 [M + 1]) of a binning: "uniform"
    e_m = m / M; "quantile" e_m = the m/M quantile of the present confidences (numpy's linear
    interpolation), which may coincide when confidences tie. Needs at least one confidence for
    "quantile"."""
    if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, bins + 1)
    if strategy == "quantile":
        p = confidence_array(confidence)
        p = p[~np.isnan(p)]
        if not p.size:
            raise ValueError("quantile bin edges need at least one confidence")
        return np.percentile(p, np.linspace(0.0, 100.0, bins + 1))
    raise ValueError(f"strategy must be one of {', '.join(BINNINGS)}, got {strategy!r}")


def reliability_bins(
    confidence: Any, correct: Any, bins: int = DEFAULT_BINS, strategy: str = "quantile"
) -> dict[str, list[Any]]:
    """The bins of the ECE: bin m holds the confidences in (e_{m-1}, e_m], the first bin also
    e_0, so equal confidences always share a bin. Returns {"edges": [M + 1], "count": [M],
    "confidence": [M] mean p, "accuracy": [M] mean a}, the means None for empty bins.
    Over the completions with a confidence; all bins empty when there is none."""
    p, a = _present(confidence, correct)
    if not p.size:
        uniform = bin_edges([], bins, "uniform")  # checks bins
        if strategy not in BINNINGS:
            raise ValueError(f"strategy must be one of {', '.join(BINNINGS)}, got {strategy!r}")
        return {
            "edges": uniform.tolist() if strategy == "uniform" else [],
            "count": [0] * bins,
            "confidence": [None] * bins,
            "accuracy": [None] * bins,
        }
    edges = bin_edges(p, bins, strategy)
    # number of interior edges strictly below p: e_{m-1} < p <= e_m (scikit-learn's assignment)
    index = np.searchsorted(edges[1:-1], p, side="left")
    count = np.bincount(index, minlength=bins)
    conf_sum = np.bincount(index, weights=p, minlength=bins)
    acc_sum = np.bincount(index, weights=a, minlength=bins)
    return {
        "edges": edges.tolist(),
        "count": count.tolist(),
        "confidence": [float(s / c) if c else None for s, c in zip(conf_sum, count, strict=True)],
        "accuracy": [float(s / c) if c else None for s, c in zip(acc_sum, count, strict=True)],
    }


def expected_calibration_error(
    confidence: Any, correct: Any, bins: int = DEFAULT_BINS, strategy: str = "quantile"
) -> float:
    """ECE = sum_m (|B_m| / N) |acc(B_m) - conf(B_m)| over the bins of `reliability_bins`
    (empty bins contribute 0); NaN when no completion has a confidence. In [0, 1]."""
    p, a = _present(confidence, correct)
    bin_edges([], bins, "uniform")  # checks bins
    if strategy not in BINNINGS:
        raise ValueError(f"strategy must be one of {', '.join(BINNINGS)}, got {strategy!r}")
    return _ece(p, a, bins, strategy)


def _ece(p: np.ndarray, a: np.ndarray, bins: int, strategy: str) -> float:
    """The ECE of present confidences p [N] and correctness a [N] (checked arrays)."""
    if not p.size:
        return float("nan")
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, bins + 1)
    else:
        edges = np.percentile(p, np.linspace(0.0, 100.0, bins + 1))
    index = np.searchsorted(edges[1:-1], p, side="left")
    # sum_m |sum_{B_m} a - sum_{B_m} p| / N, the same as the count-weighted gaps
    gap = np.bincount(index, weights=a - p, minlength=bins)
    return float(np.abs(gap).sum() / p.size)


FIGURES = ("coverage", "brier", "ece_mass", "ece_width", "auroc", "overconfidence")
"""The figures of a calibration table (docs/algorithms.md §6): coverage of parsable
confidences, Brier score, ECE with equal-mass ("quantile") and with equal-width ("uniform")
bins, AUROC, mean confidence minus accuracy."""


def _numpy_lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's own interpolation of `percentile` (method "linear"), to the last bit: a + (b -
    a) t, computed from b's side where t >= 0.5."""
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1.0 - t), a + diff * t)


class _Counts:
    """A run's completions as counts per problem and distinct confidence, so that a resample of
    problems (a multiplicity w [P] per problem) gives every figure in O(N + K) without sorting:
    the figures depend on the completions only through how many correct (n1) and wrong (n0)
    ones each distinct confidence value v [K] has, and how many have none.

    The figures equal those of the point functions on the resampled completions (tests check
    it): the quantile edges interpolate as numpy's `percentile` (linear) does.
    """

    def __init__(self, p: np.ndarray, a: np.ndarray, problem: np.ndarray, problems: int) -> None:
        present = ~np.isnan(p)
        self.values, codes = np.unique(p[present], return_inverse=True)
        self.problems = problems
        self.code = np.full(p.size, self.values.size, dtype=np.int64)  # K = missing
        self.code[present] = codes.reshape(-1)
        self.problem = problem
        self.a = a

    def figures(self, multiplicity: np.ndarray | None, bins: int) -> dict[str, float]:
        """Every figure of FIGURES when problem j is counted multiplicity[j] times (None: once)."""
        k = self.values.size
        weight = np.ones(self.a.size) if multiplicity is None else multiplicity[self.problem]
        n1 = np.bincount(self.code, weights=weight * self.a, minlength=k + 1)
        both = np.bincount(self.code, weights=weight, minlength=k + 1)
        total = both.sum()
        n1, both = n1[:k], both[:k]
        n0 = both - n1
        present = both.sum()
        out = dict.fromkeys(FIGURES, float("nan"))
        out["coverage"] = float(present / total) if total else float("nan")
        if not present:
            return out
        v = self.values
        out["brier"] = float((n1 * (1.0 - v) ** 2 + n0 * v**2).sum() / present)
        out["overconfidence"] = float(((both * v).sum() - n1.sum()) / present)
        positives, negatives = n1.sum(), n0.sum()
        if positives and negatives:
            below = np.cumsum(n0) - n0  # wrong completions with a lower confidence
            out["auroc"] = float((n1 * (below + 0.5 * n0)).sum() / (positives * negatives))
        gap = n1 - both * v  # per value: sum a - sum p
        for key, edges in (
            ("ece_width", np.linspace(0.0, 1.0, bins + 1)),
            ("ece_mass", self._quantile_edges(both, present, bins)),
        ):
            index = np.searchsorted(edges[1:-1], v, side="left")
            out[key] = float(
                np.abs(np.bincount(index, weights=gap, minlength=bins)).sum() / present
            )
        return out

    def _quantile_edges(self, both: np.ndarray, present: float, bins: int) -> np.ndarray:
        """np.percentile(confidences, linspace(0, 100, bins + 1)) of the resampled multiset."""
        size = round(present)
        virtual = (size - 1) * (np.linspace(0.0, 100.0, bins + 1) / 100.0)
        previous = np.floor(virtual)
        following = np.minimum(previous + 1, size - 1)
        cumulative = np.cumsum(both)
        # the j-th smallest confidence (0-based) is values[first k with cumulative > j]
        low = self.values[np.searchsorted(cumulative, previous, side="right")]
        high = self.values[np.searchsorted(cumulative, following, side="right")]
        return _numpy_lerp(low, high, virtual - previous)


def _problem_index(problems: Sequence[Hashable] | np.ndarray, size: int) -> tuple[np.ndarray, list]:
    """(index [N] of each completion's problem in order of first appearance, the problem ids)."""
    ids = list(problems)
    if len(ids) != size:
        raise ValueError(f"problems has {len(ids)} ids, confidence {size}")
    order: dict[Hashable, int] = {}
    index = np.asarray([order.setdefault(key, len(order)) for key in ids], dtype=np.int64)
    return index, list(order)


def _interval(bounds: np.ndarray) -> list[float] | None:
    """[low, high] of a bootstrap_interval row as plain numbers; None where it is undefined."""
    return None if np.isnan(bounds[0]) else [float(bounds[0]), float(bounds[1])]


def _value(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def calibration_table(
    confidence: Any,
    correct: Any,
    problems: Sequence[Hashable] | np.ndarray,
    bins: int = DEFAULT_BINS,
    confidence_level: float = 0.95,
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Every calibration figure of one set of completions, with its bootstrap interval.

    Returns {"completions": total, "with_confidence": N, "missing": total - N, "accuracy":
    accuracy over the N (None if N = 0), "mean_confidence", "bins": M, and for each key of
    FIGURES (coverage, brier, ece_mass, ece_width, auroc, overconfidence): the value (None if
    undefined) and "<key>_ci": [low, high] (None if undefined in every resample)}, plain
    Python numbers. The interval: groupwise.metrics.bootstrap_interval of the figure at level
    `confidence_level` over `bootstrap` resamples of the problems seeded with `seed` (the
    resamples of pass_at_k_table); resamples where it is undefined are left out.
    """
    bin_edges([], bins, "uniform")  # checks bins
    p = confidence_array(confidence)
    a = _correct_array(correct, p.size)
    if not p.size:
        raise ValueError("calibration_table needs at least one completion")
    index, ids = _problem_index(problems, p.size)
    present = ~np.isnan(p)
    table: dict[str, Any] = {
        "completions": int(p.size),
        "with_confidence": int(present.sum()),
        "missing": int((~present).sum()),
        "accuracy": float(a[present].mean()) if present.any() else None,
        "mean_confidence": float(p[present].mean()) if present.any() else None,
        "bins": bins,
    }
    counts = _Counts(p, a, index, len(ids))
    point = counts.figures(None, bins)
    figures = _resampled_figures([counts], bins)
    intervals = bootstrap_interval(
        lambda chosen: figures(chosen)[0], len(ids), confidence_level, bootstrap, seed
    )
    for key, bounds in zip(FIGURES, intervals, strict=True):
        table[key] = _value(point[key])
        table[f"{key}_ci"] = _interval(bounds)
    return table


def _resampled_figures(runs: Sequence[_Counts], bins: int) -> Callable[[np.ndarray], np.ndarray]:
    """The statistic of bootstrap_interval for calibration: resampled problem indices [rows, P]
    -> every figure of FIGURES of each run on each resample [runs, figures, rows] (the runs'
    problem indices are aligned, so a resample draws the same problems for every run)."""
    problems = runs[0].problems

    def figures(index: np.ndarray) -> np.ndarray:
        out = np.empty((len(runs), len(FIGURES), index.shape[0]))
        for row, chosen in enumerate(index):
            multiplicity = np.bincount(chosen, minlength=problems).astype(np.float64)
            for run, counts in enumerate(runs):
                values = counts.figures(multiplicity, bins)
                out[run, :, row] = [values[key] for key in FIGURES]
        return out

    return figures


def paired_calibration_table(
    first: Mapping[str, Any],
    second: Mapping[str, Any],
    bins: int = DEFAULT_BINS,
    confidence_level: float = 0.95,
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The difference second - first of every calibration figure of two runs on the same
    problems, with a paired bootstrap interval: each resample draws the problems once and
    computes both runs' figures on them (docs/algorithms.md §6).

    first, second: {"confidence": [N_r], "correct": [N_r], "problems": [N_r]} of each run (the
    runs may have different numbers of completions per problem). Only the problems both runs
    have are used. Returns {"problems": shared count, "<key>": difference (None if undefined
    in either run), "<key>_ci": [low, high] of the differences over the resamples where both
    are defined (None if there is none)} for each key of FIGURES.
    """
    bin_edges([], bins, "uniform")  # checks bins
    arrays = []
    for run in (first, second):
        p = confidence_array(run["confidence"])
        a = _correct_array(run["correct"], p.size)
        ids = list(run["problems"])
        if len(ids) != p.size:
            raise ValueError(f"problems has {len(ids)} ids, confidence {p.size}")
        arrays.append((p, a, ids))
    in_second = set(arrays[1][2])
    shared = [key for key in dict.fromkeys(arrays[0][2]) if key in in_second]
    if not shared:
        raise ValueError("the two runs share no problem")
    position = {key: i for i, key in enumerate(shared)}
    runs = []
    for p, a, ids in arrays:
        keep = np.asarray([key in position for key in ids], dtype=bool)
        index = np.asarray([position[key] for key in ids if key in position], dtype=np.int64)
        runs.append(_Counts(p[keep], a[keep], index, len(shared)))
    points = [counts.figures(None, bins) for counts in runs]
    figures = _resampled_figures(runs, bins)

    def difference(chosen: np.ndarray) -> np.ndarray:
        both = figures(chosen)
        return both[1] - both[0]

    intervals = bootstrap_interval(difference, len(shared), confidence_level, bootstrap, seed)
    table: dict[str, Any] = {"problems": len(shared)}
    for key, bounds in zip(FIGURES, intervals, strict=True):
        table[key] = _value(points[1][key] - points[0][key])
        table[f"{key}_ci"] = _interval(bounds)
    return table
