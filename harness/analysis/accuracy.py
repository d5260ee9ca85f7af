"""Accuracy with Wilson intervals, and paired comparisons on the same items."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from harness.analysis.load import CellData
from harness.workloads.stats import PairedComparison, paired_comparison, wilson_interval


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
    paired: PairedComparison  # a = the drafter arm, b = the baseline

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
    return AccuracyComparison(
        drafter.task,
        drafter.arm,
        baseline.arm,
        n,
        acc,
        base_acc,
        (lo, hi),
        within,
        paired_comparison({i: a[i] for i in ids}, {i: b[i] for i in ids}),
    )
