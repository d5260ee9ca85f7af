"""Accuracy with Wilson intervals, and paired comparisons on the same items."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist

from harness.analysis.load import CellData


@dataclass(frozen=True)
class Paired:
    n: int
    both_right: int
    only_a: int
    only_b: int
    both_wrong: int
    mcnemar_p: float


def _wilson(correct: int, n: int, level: float) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _paired(a: dict[str, bool], b: dict[str, bool]) -> Paired:
    ids = [i for i in a if i in b]
    both_right = sum(1 for i in ids if a[i] and b[i])
    only_a = sum(1 for i in ids if a[i] and not b[i])
    only_b = sum(1 for i in ids if b[i] and not a[i])
    both_wrong = len(ids) - both_right - only_a - only_b
    k, m = min(only_a, only_b), only_a + only_b
    # Exact McNemar: two-sided binomial test of the discordant pairs at p = 1/2.
    p = 1.0 if m == 0 else min(1.0, 2 * sum(math.comb(m, j) for j in range(k + 1)) / 2**m)
    return Paired(len(ids), both_right, only_a, only_b, both_wrong, p)


def wilson_interval(correct: int, n: int, level: float = 0.95) -> tuple[float, float]:
    try:  # the workloads module's version, once it lands
        from harness.workloads import wilson_interval as shared
    except ImportError:
        return _wilson(correct, n, level)
    return tuple(shared(correct, n, level=level))


def paired_comparison(a: dict[str, bool], b: dict[str, bool]) -> Paired:
    try:
        from harness.workloads import paired_comparison as shared
    except ImportError:
        return _paired(a, b)
    r = shared(a, b)
    return Paired(r.n, r.both_right, r.only_a, r.only_b, r.both_wrong, r.mcnemar_p)


@dataclass(frozen=True)
class AccuracyComparison:
    task: str
    arm: str
    baseline: str
    n: int  # items both cells scored
    accuracy: float
    baseline_accuracy: float
    baseline_interval: tuple[float, float]
    within: bool
    paired: Paired  # a = the drafter arm, b = the baseline

    def to_dict(self) -> dict:
        d = asdict(self)
        d["baseline_interval"] = list(self.baseline_interval)
        return d


def compare_accuracy(drafter: CellData, baseline: CellData, level: float) -> AccuracyComparison:
    """The drafter's accuracy against the baseline's Wilson interval on the same items."""
    a, b = drafter.scores or {}, baseline.scores or {}
    ids = [i for i in b if i in a]
    n = len(ids)
    acc = sum(a[i] for i in ids) / n if n else math.nan
    base_correct = sum(b[i] for i in ids)
    base_acc = base_correct / n if n else math.nan
    lo, hi = wilson_interval(base_correct, n, level)
    within = bool(n) and lo <= acc <= hi
    return AccuracyComparison(drafter.task, drafter.arm, baseline.arm, n, acc, base_acc, (lo, hi),
                              within, paired_comparison({i: a[i] for i in ids},
                                                        {i: b[i] for i in ids}))
