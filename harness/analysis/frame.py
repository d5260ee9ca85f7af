"""The analysis tables' one shape: each table's row model (harness/analysis/rows.py)
declares its columns, in order; the DataFrame holds them, and the bars read its rows back
as that model rather than spelling column names."""

from __future__ import annotations

import math
import types
from dataclasses import fields
from functools import cache
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

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


@cache
def text_fields(row: type) -> frozenset[str]:
    """A dataclass row's fields that hold text (`str` or `str | None`)."""
    if issubclass(row, BaseModel):
        return frozenset()  # pydantic checks its own fields
    out = set()
    for name, hint in get_type_hints(row).items():
        union = get_origin(hint) in (Union, types.UnionType)
        if hint is str or (union and set(get_args(hint)) == {str, type(None)}):
            out.add(name)
    return frozenset(out)


def missing_text_as_none(values: dict[str, Any], row: type) -> dict[str, Any]:
    """pandas (3) keeps a text column's missing entries as NaN: a text field reads None."""
    for name in text_fields(row):
        value = values.get(name)
        if isinstance(value, float) and math.isnan(value):
            values[name] = None
    return values


def rows_of(df: pd.DataFrame, row: type[R]) -> list[R]:
    """The table's rows as `row`s, in table order; a column the table lacks (a hand-made
    one) is None, a missing text None, and a missing figure as the table holds it (NaN
    or None)."""
    names = columns(row)
    records: list[dict[str, Any]] = df.to_dict("records")
    return [row(**missing_text_as_none({n: r.get(n) for n in names}, row)) for r in records]
