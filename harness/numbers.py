"""A figure as text, the one way the CLI's tables and the reports print a number."""

from __future__ import annotations

import math


def number_text(v: object, spec: str = ".2f") -> str:
    """A figure in `spec`; "-" for a missing one (None, NaN); other text as it is."""
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-" if v is None else str(v)
    return "-" if math.isnan(x) else format(x, spec)


def is_nan(v: object) -> bool:
    """A missing figure: None or NaN."""
    return v is None or (isinstance(v, float) and math.isnan(v))
