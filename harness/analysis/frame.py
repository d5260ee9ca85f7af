"""The analysis tables' one shape: rows as a DataFrame with exactly the named columns."""

from __future__ import annotations

import pandas as pd


def framed(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    """`rows` with `columns` in that order; a column no row has is all None (an empty
    table keeps its header)."""
    df = pd.DataFrame(rows)
    for col in columns:
        if col not in df.columns:
            df[col] = None
    return df[columns]
