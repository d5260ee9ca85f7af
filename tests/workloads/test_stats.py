"""Wilson intervals, exact McNemar and the paired comparison of two arms."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from harness.workloads import (
    ItemScore,
    PairedComparison,
    paired_comparison,
    summarize,
    wilson_interval,
)
from harness.workloads.stats import mcnemar_exact_p


def test_wilson_known_values():
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.40383, abs=1e-5) and hi == pytest.approx(0.59617, abs=1e-5)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(3.841459 / 13.841459, abs=1e-6)
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and lo == pytest.approx(1 - 3.841459 / 13.841459, abs=1e-6)
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(("k", "n"), [(1, 164), (80, 164), (163, 164), (7, 20), (500, 1000)])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_wilson_endpoints_solve_the_score_equation(k, n, level):
    # The Wilson interval is {p : (phat - p)^2 <= z^2 p (1 - p) / n}; both ends are roots.
    z = NormalDist().inv_cdf(0.5 + level / 2)
    phat = k / n
    lo, hi = wilson_interval(k, n, level)
    for p in (lo, hi):
        assert (phat - p) ** 2 == pytest.approx(z * z * p * (1 - p) / n, rel=1e-9, abs=1e-15)
    assert 0 < lo < phat < hi < 1


def test_wilson_accepts_numpy_integers_and_rejects_bad_input():
    assert wilson_interval(np.int64(5), np.int64(10)) == wilson_interval(5, 10)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)
    with pytest.raises(ValueError):
        wilson_interval(-1, 10)
    with pytest.raises(TypeError):
        wilson_interval(5.5, 10)
    with pytest.raises(ValueError):
        wilson_interval(5, 10, level=1.0)


@pytest.mark.parametrize(
    ("only_a", "only_b", "p"),
    [
        (0, 0, 1.0),
        (0, 5, 2 / 32),
        (5, 0, 2 / 32),
        (1, 9, 2 * 11 / 1024),
        (5, 5, 1.0),
        (3, 4, 1.0),
        (0, 1, 1.0),
    ],
)
def test_mcnemar_exact_values(only_a, only_b, p):
    assert mcnemar_exact_p(only_a, only_b) == pytest.approx(p, rel=1e-12)


def test_mcnemar_exact_large_counts_do_not_overflow():
    p = mcnemar_exact_p(600, 700)
    # Normal approximation with continuity correction: about 0.0065.
    z = (abs(700 - 600) - 1) / math.sqrt(1300)
    approx = 2 * (1 - NormalDist().cdf(z))
    assert p == pytest.approx(approx, rel=0.1)


def test_paired_comparison_counts_and_p():
    a = {"x": True, "y": True, "z": False, "w": False, "v": True}
    b = {"x": True, "y": False, "z": True, "w": False, "v": False}
    r = paired_comparison(a, b)
    assert r == PairedComparison(n=5, both_right=1, only_a=2, only_b=1, both_wrong=1, mcnemar_p=1.0)
    assert r.accuracy_a == 0.6 and r.accuracy_b == 0.4
    assert r.to_dict()["only_a"] == 2


def test_paired_comparison_refuses_different_ids():
    with pytest.raises(ValueError, match="same item ids.*only in A.*'?y"):
        paired_comparison({"x": True, "y": True}, {"x": True, "z": False})


def test_paired_comparison_of_nothing():
    r = paired_comparison({}, {})
    assert r.n == 0 and r.mcnemar_p == 1.0 and r.accuracy_a is None


def test_summarize():
    scores = [ItemScore(f"gsm8k:{i}", "1", i % 4 != 0, "") for i in range(164)]
    s = summarize("gsm8k", scores)
    assert s["task"] == "gsm8k" and s["n"] == 164 and s["correct"] == 123
    assert s["accuracy"] == pytest.approx(123 / 164)
    assert s["ci95"] == list(wilson_interval(123, 164))
    assert summarize("mmlu", [])["accuracy"] is None
