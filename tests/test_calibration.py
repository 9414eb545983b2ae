"""groupwise.calibration (docs/algorithms.md §6): hand-computed values, scikit-learn's
brier_score_loss / roc_auc_score / calibration_curve as independent implementations, and the
bootstrap tables against a brute-force resampling with the point functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, roc_auc_score

from groupwise.calibration import (
    BINNINGS,
    FIGURES,
    auroc,
    bin_edges,
    brier_score,
    calibration_table,
    confidence_array,
    coverage,
    expected_calibration_error,
    overconfidence,
    paired_calibration_table,
    reliability_bins,
)

# 6 completions, one without a confidence: p = 0.9, 0.8, 0.8, 0.3, 0.6 present, a = 1 1 0 0 1
HAND_P = [0.9, 0.8, None, 0.8, 0.3, 0.6]
HAND_A = [1, 1, 1, 0, 0, 1]


def test_hand_computed_figures() -> None:
    assert coverage(HAND_P) == pytest.approx(5 / 6)
    # (0.1^2 + 0.2^2 + 0.8^2 + 0.3^2 + 0.4^2) / 5 = (0.01 + 0.04 + 0.64 + 0.09 + 0.16) / 5
    assert brier_score(HAND_P, HAND_A) == pytest.approx(0.94 / 5)
    # mean p = 3.4 / 5 = 0.68, accuracy over the same five = 3 / 5
    assert overconfidence(HAND_P, HAND_A) == pytest.approx(0.68 - 0.6)
    # correct {0.9, 0.8, 0.6} vs wrong {0.8, 0.3}: 0.9 beats both (2), 0.8 beats 0.3 and ties
    # 0.8 (1.5), 0.6 beats 0.3 (1): 4.5 / 6
    assert auroc(HAND_P, HAND_A) == pytest.approx(4.5 / 6)
    # equal-width: bins (0.2, 0.3] -> {0.3: a 0}, (0.5, 0.6] -> {0.6: 1}, (0.7, 0.8] -> {0.8: 1,
    # 0.8: 0}, (0.8, 0.9] -> {0.9: 1}; gaps 0.3, 0.4, 2 * |0.5 - 0.8|, 0.1
    width = (0.3 + 0.4 + 2 * 0.3 + 0.1) / 5
    assert expected_calibration_error(HAND_P, HAND_A, 10, "uniform") == pytest.approx(width)
    # equal-mass with M = 2: edges = percentiles 0, 50, 100 of {0.3, 0.6, 0.8, 0.8, 0.9} =
    # 0.3, 0.8, 0.9: bin 1 = [0.3, 0.8] holds 0.3, 0.6, 0.8, 0.8 (ties share it), bin 2 = 0.9
    mass = (4 * abs(2 / 4 - 2.5 / 4) + 1 * 0.1) / 5
    assert expected_calibration_error(HAND_P, HAND_A, 2, "quantile") == pytest.approx(mass)
    table = reliability_bins(HAND_P, HAND_A, 2, "quantile")
    assert table["edges"] == pytest.approx([0.3, 0.8, 0.9])
    assert table["count"] == [4, 1]
    assert table["accuracy"] == pytest.approx([0.5, 1.0])
    assert table["confidence"] == pytest.approx([2.5 / 4, 0.9])


def test_missing_is_never_counted_as_half() -> None:
    # with the missing one read as 0.5 the Brier score would be (0.94 + 0.25) / 6
    assert brier_score(HAND_P, HAND_A) != pytest.approx(1.19 / 6)
    assert math.isnan(brier_score([None, None], [1, 0]))
    assert math.isnan(expected_calibration_error([None], [1]))
    assert coverage([None, None]) == 0.0
    table = calibration_table([None, 0.5, None], [1, 0, 0], ["a", "a", "b"], bootstrap=20)
    assert (table["completions"], table["with_confidence"], table["missing"]) == (3, 1, 2)
    assert table["coverage"] == pytest.approx(1 / 3)
    assert table["auroc"] is None  # one class among the present
    assert table["auroc_ci"] is None
    assert table["brier"] == pytest.approx(0.25)


def test_edges_of_the_binnings() -> None:
    assert bin_edges([], 4, "uniform") == pytest.approx([0, 0.25, 0.5, 0.75, 1])
    p = np.array([0.1, 0.2, 0.2, 0.9])
    assert bin_edges(p, 4, "quantile") == pytest.approx(np.percentile(p, [0, 25, 50, 75, 100]))
    # a confidence on an edge belongs to the bin below it; 0 to the first bin
    table = reliability_bins([0.0, 0.25, 0.2500001, 1.0], [0, 0, 0, 1], 4, "uniform")
    assert table["count"] == [2, 1, 0, 1]
    assert table["confidence"][2] is None


@pytest.mark.parametrize("seed", range(6))
def test_against_scikit_learn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    # verbalized confidences tie a lot: a coarse grid, plus some missing
    p = np.round(rng.random(n) * 20) / 20
    a = (rng.random(n) < p).astype(int)
    assert brier_score(p, a) == pytest.approx(brier_score_loss(a, p), abs=1e-12)
    assert auroc(p, a) == pytest.approx(roc_auc_score(a, p), abs=1e-12)
    for strategy in BINNINGS:
        bins = reliability_bins(p, a, 10, strategy)
        prob_true, prob_pred = calibration_curve(a, p, n_bins=10, strategy=strategy)
        full = [i for i, c in enumerate(bins["count"]) if c]
        assert [bins["accuracy"][i] for i in full] == pytest.approx(prob_true, abs=1e-12)
        assert [bins["confidence"][i] for i in full] == pytest.approx(prob_pred, abs=1e-12)
        counts = np.asarray(bins["count"])[full]
        ece = float(np.sum(counts / n * np.abs(prob_true - prob_pred)))
        assert expected_calibration_error(p, a, 10, strategy) == pytest.approx(ece, abs=1e-12)
    missing = p.copy()
    missing[::5] = np.nan
    keep = ~np.isnan(missing)
    assert brier_score(missing, a) == pytest.approx(brier_score_loss(a[keep], p[keep]))
    assert auroc(missing, a) == pytest.approx(roc_auc_score(a[keep], p[keep]))


def _point(p: np.ndarray, a: np.ndarray, bins: int) -> dict[str, float]:
    return {
        "coverage": coverage(p) if p.size else math.nan,
        "brier": brier_score(p, a),
        "ece_mass": expected_calibration_error(p, a, bins, "quantile"),
        "ece_width": expected_calibration_error(p, a, bins, "uniform"),
        "auroc": auroc(p, a),
        "overconfidence": overconfidence(p, a),
    }


def _brute_interval(
    p: np.ndarray, a: np.ndarray, ids: np.ndarray, bootstrap: int, seed: int
) -> dict[str, list[float] | None]:
    """Resample the problems as the docs say, concatenate their completions, apply the point
    functions, take the 2.5 / 97.5 % quantiles of the defined values."""
    problems = list(dict.fromkeys(ids.tolist()))
    rows = {key: np.flatnonzero(ids == key) for key in problems}
    rng = np.random.default_rng(seed)
    values: dict[str, list[float]] = {key: [] for key in FIGURES}
    for _ in range(bootstrap):
        chosen = rng.integers(0, len(problems), size=len(problems))
        index = np.concatenate([rows[problems[i]] for i in chosen])
        for key, value in _point(p[index], a[index], 10).items():
            values[key].append(value)
    out: dict[str, list[float] | None] = {}
    for key, vals in values.items():
        finite = [v for v in vals if not math.isnan(v)]
        out[key] = list(np.quantile(finite, [0.025, 0.975])) if finite else None
    return out


@pytest.mark.parametrize("seed", range(3))
def test_table_equals_point_functions_and_brute_force_bootstrap(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    problems, per = 30, 4
    ids = np.repeat(np.arange(problems), per)
    p = np.round(rng.random(problems * per) * 10) / 10
    p[rng.random(p.size) < 0.2] = np.nan
    # some problems always right, some always wrong: resamples with one class happen
    a = (rng.random(p.size) < np.repeat(rng.random(problems), per)).astype(int)
    table = calibration_table(p, a, ids, bootstrap=200, seed=seed)
    point = _point(p, a, 10)
    brute = _brute_interval(p, a, ids, 200, seed)
    for key in FIGURES:
        assert table[key] == pytest.approx(point[key], abs=1e-12), key
        assert table[f"{key}_ci"] == pytest.approx(brute[key], abs=1e-12), key
    assert table["with_confidence"] == int((~np.isnan(p)).sum())


def test_interval_covers_and_repeats() -> None:
    rng = np.random.default_rng(7)
    ids = np.repeat(np.arange(200), 8)
    p = np.round(rng.random(ids.size), 1)
    a = (rng.random(ids.size) < p).astype(int)
    one = calibration_table(p, a, ids.tolist(), bootstrap=300, seed=3)
    assert one == calibration_table(p, a, ids.tolist(), bootstrap=300, seed=3)
    for key in FIGURES:
        low, high = one[f"{key}_ci"]
        assert low <= one[key] <= high, key
    # resampling problems, not completions: 8 perfectly correlated completions per problem
    # give a wider interval than 8x as many independent problems
    same = np.repeat(rng.random(200), 8).round(1)
    a_same = np.repeat((rng.random(200) < 0.5).astype(int), 8)
    grouped = calibration_table(same, a_same, ids, bootstrap=300)
    single = calibration_table(same, a_same, np.arange(ids.size), bootstrap=300)
    width = grouped["brier_ci"][1] - grouped["brier_ci"][0]
    assert width > 2 * (single["brier_ci"][1] - single["brier_ci"][0])


def test_paired_table() -> None:
    rng = np.random.default_rng(11)
    ids = np.repeat(np.arange(60), 4)
    p = np.round(rng.random(ids.size), 1)
    a = (rng.random(ids.size) < p).astype(int)
    first = {"confidence": p, "correct": a, "problems": ids}
    # the same run against itself: every difference is 0 with a [0, 0] interval
    same = paired_calibration_table(first, first, bootstrap=100)
    for key in FIGURES:
        assert same[key] == pytest.approx(0.0, abs=1e-15)
        assert same[f"{key}_ci"] == pytest.approx([0.0, 0.0], abs=1e-15)
    # a run that is always 0.1 more confident: overconfidence rises by 0.1 on every resample
    shifted = {"confidence": np.minimum(p + 0.1, 1.0), "correct": a, "problems": ids}
    diff = paired_calibration_table(first, shifted, bootstrap=100)
    shift = float(np.mean(np.minimum(p + 0.1, 1.0) - p))
    assert diff["overconfidence"] == pytest.approx(shift)
    assert diff["problems"] == 60
    # only the shared problems are compared, whatever each run holds beyond them
    extra = {
        "confidence": np.r_[p, 0.5],
        "correct": np.r_[a, 1],
        "problems": np.r_[ids, 999],
    }
    assert paired_calibration_table(first, extra, bootstrap=50)["brier"] == pytest.approx(0.0)
    brier = paired_calibration_table(first, shifted, bootstrap=50)["brier"]
    assert brier == pytest.approx(brier_score(shifted["confidence"], a) - brier_score(p, a))
    with pytest.raises(ValueError, match="share no problem"):
        paired_calibration_table(first, {**extra, "problems": np.r_[ids + 1000, 999]})


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"confidence\[1\] = 1.5"):
        confidence_array([0.2, 1.5])
    with pytest.raises(ValueError, match="0/1"):
        brier_score([0.2], [2])
    with pytest.raises(ValueError, match="correct has 1 values"):
        brier_score([0.2, 0.3], [1])
    with pytest.raises(ValueError, match="strategy"):
        expected_calibration_error([0.2], [1], 10, "equal")
    with pytest.raises(ValueError, match="bins"):
        bin_edges([0.2], 0)
    with pytest.raises(ValueError, match="problems has 1 ids"):
        calibration_table([0.2, 0.3], [1, 0], ["a"])
    with pytest.raises(ValueError, match="bootstrap"):
        calibration_table([0.2], [1], ["a"], bootstrap=0)
