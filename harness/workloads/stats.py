"""Accuracy intervals and paired comparisons of two arms on the same items."""

from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass
from fractions import Fraction
from statistics import NormalDist


def wilson_interval(correct: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion correct/n at confidence `level`.

    n == 0 gives the uninformative (0.0, 1.0). Endpoints are clamped to [0, 1]
    and are exactly 0 (1) when correct is 0 (n).
    """
    try:  # ints, and integer types such as numpy's; not floats
        correct, n = operator.index(correct), operator.index(n)
    except TypeError as err:
        raise TypeError("correct and n must be integers") from err
    if n < 0 or correct < 0 or correct > n:
        raise ValueError(f"need 0 <= correct <= n, got correct={correct}, n={n}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n == 0:
        return (0.0, 1.0)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    z2 = z * z
    p = correct / n
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denom
    lo = 0.0 if correct == 0 else max(0.0, center - half)
    hi = 1.0 if correct == n else min(1.0, center + half)
    return (lo, hi)


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar test: binomial(only_a + only_b, 1/2) on the discordant pairs.

    p = min(1, 2 * P[X <= min(only_a, only_b)]), computed in exact rational
    arithmetic (no overflow at any n); 1.0 when there are no discordant pairs.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError("counts must be non-negative")
    d = only_a + only_b
    if d == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(d, i) for i in range(k + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**d)))


@dataclass(frozen=True)
class PairedComparison:
    """Two arms scored on the same items; a = first arm, b = second."""

    n: int
    both_right: int
    only_a: int
    only_b: int
    both_wrong: int
    mcnemar_p: float  # exact two-sided binomial test on only_a vs only_b

    @property
    def accuracy_a(self) -> float | None:
        return (self.both_right + self.only_a) / self.n if self.n else None

    @property
    def accuracy_b(self) -> float | None:
        return (self.both_right + self.only_b) / self.n if self.n else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["accuracy_a"] = self.accuracy_a
        d["accuracy_b"] = self.accuracy_b
        return d


def paired_comparison(a: dict[str, bool], b: dict[str, bool]) -> PairedComparison:
    """Cross-tabulate per-item correctness of two arms on the same item ids.

    Raises ValueError naming a few ids when the two id sets differ.
    """
    ka, kb = set(a), set(b)
    if ka != kb:
        only_in_a = sorted(ka - kb)
        only_in_b = sorted(kb - ka)
        parts = []
        if only_in_a:
            parts.append(f"{len(only_in_a)} only in A (e.g. {', '.join(only_in_a[:3])})")
        if only_in_b:
            parts.append(f"{len(only_in_b)} only in B (e.g. {', '.join(only_in_b[:3])})")
        raise ValueError(
            "paired comparison needs the same item ids in both arms: " + "; ".join(parts)
        )
    both_right = only_a = only_b = both_wrong = 0
    for key in ka:
        ra, rb = bool(a[key]), bool(b[key])
        if ra and rb:
            both_right += 1
        elif ra:
            only_a += 1
        elif rb:
            only_b += 1
        else:
            both_wrong += 1
    return PairedComparison(
        n=len(ka),
        both_right=both_right,
        only_a=only_a,
        only_b=only_b,
        both_wrong=both_wrong,
        mcnemar_p=mcnemar_exact_p(only_a, only_b),
    )
