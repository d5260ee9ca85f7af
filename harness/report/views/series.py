"""The figure series the views hand their renderers: arrays named by what they hold, so a
PDF page or an HTML figure draws them without knowing the analysis tables' columns."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


def figures(values: Iterable[float | None]) -> np.ndarray:
    """Figures to draw, as floats: a missing one (None) is NaN, a gap."""
    return np.array([np.nan if v is None else v for v in values], dtype=float)


@dataclass(frozen=True)
class Estimates:
    """A figure at each point with its interval's edges (NaN: none there)."""

    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
