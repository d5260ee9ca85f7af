"""Accuracy with Wilson intervals, and paired comparisons on the same items."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from harness.analysis.load import CellData
from harness.workloads import paired_comparison as shared_paired
from harness.workloads import wilson_interval as shared_wilson


@dataclass(frozen=True)
class Paired:
    n: int
    both_right: int
    only_a: int
    only_b: int
    both_wrong: int
    mcnemar_p: float


def wilson_interval(correct: int, n: int, level: float = 0.95) -> tuple[float, float]:
    lo, hi = shared_wilson(correct, n, level=level)
    return (lo, hi)


def paired_comparison(a: dict[str, bool], b: dict[str, bool]) -> Paired:
    r = shared_paired(a, b)
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
