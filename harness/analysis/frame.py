"""The analysis tables' one shape: each table's row model (harness/analysis/rows.py)
declares its columns, in order; the DataFrame holds them, and the bars read its rows back
as that model rather than spelling column names."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

import pandas as pd
from pydantic import BaseModel

R = TypeVar("R")


def columns(row: type[Any]) -> list[str]:
    """A row model's columns: its fields in order (a base class's first); a pydantic one
    too (the verdict's rows, where a table is one)."""
    if issubclass(row, BaseModel):
        return list(row.model_fields)
    return [f.name for f in fields(row)]


def framed(rows: list[dict], row: type[Any]) -> pd.DataFrame:
    """`rows` with `row`'s columns in that order; a column no row has is all None (an
    empty table keeps its header)."""
    names = columns(row)
    df = pd.DataFrame(rows)
    for col in names:
        if col not in df.columns:
            df[col] = None
    return df[names]


def rows_of(df: pd.DataFrame, row: type[R]) -> list[R]:
    """The table's rows as `row`s, in table order; a column the table lacks (a hand-made
    one) is None, and a missing figure is as the table holds it (NaN or None)."""
    names = columns(row)
    records: list[dict[str, Any]] = df.to_dict("records")
    return [row(**{n: r.get(n) for n in names}) for r in records]
