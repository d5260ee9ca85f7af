"""Tables the CLI prints: plain fixed-width text that no terminal width wraps inside a
cell (rich's tables squeeze and wrap cells to 80 columns when piped), or CSV and JSON
for scripts (`--format csv|json`)."""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

FORMATS = ("table", "csv", "json")


def add_format_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default: fixed-width text, never wrapped), or csv / json for"
        " scripts (the main table only for csv)",
    )


def cell_text(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def text_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[str] = ()
) -> list[str]:
    """Columns as wide as their widest cell, two spaces apart; a line is as long as it
    needs to be (a narrow terminal may fold the line, never a cell)."""
    cells = [[cell_text(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            (v.rjust(w) if h in right else v.ljust(w))
            for v, w, h in zip(values, widths, headers, strict=True)
        ).rstrip()

    return [line(list(headers)), line(["-" * w for w in widths]), *(line(r) for r in cells)]


def write_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    fmt: str,
    right: Sequence[str] = (),
    title: str | None = None,
) -> None:
    """One table on stdout in the chosen format (json: a list of objects)."""
    out = sys.stdout
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(headers)
        w.writerows([["" if _missing(v) else v for v in row] for row in rows])
    elif fmt == "json":
        json.dump(
            [
                dict(zip(headers, (None if _missing(v) else v for v in row), strict=True))
                for row in rows
            ],
            out,
            indent=1,
            default=str,
        )
        out.write("\n")
    else:
        if title:
            out.write(title + "\n")
        out.write("\n".join(text_table(headers, rows, right)) + "\n")
    out.flush()


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))
