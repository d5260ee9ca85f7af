"""The PDF pages and HTML sections draw what the views hand them: no renderer reads an
analysis table or query itself, and none indexes data by an analysis column's name (the
views build typed series from the tables' row models; issue 49)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from harness.analysis import cell_rows, rows

REPORT = Path(__file__).resolve().parents[2] / "harness" / "report"


def renderers() -> list[Path]:
    found = [
        *REPORT.glob("pages_*.py"),
        *REPORT.glob("html_fig*.py"),
        REPORT / "html_sections.py",
        REPORT / "html_compare.py",
    ]
    assert len(found) > 12, f"{REPORT}: the renderer modules were not found"
    return sorted(found)


def analysis_columns() -> set[str]:
    """Every analysis table's column: its row model's fields."""
    out: set[str] = set()
    for module in (rows, cell_rows):
        for value in vars(module).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value):
                out |= {f.name for f in dataclasses.fields(value)}
    assert {"concurrency", "speedup", "ci_lower", "per_user_speed"} <= out
    return out


def lookups(source: str, columns: set[str]) -> list[str]:
    """`a.<anything>` (the Analysis read directly) and `x["<column>"]` in a module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "a":
                found.append(f"line {node.lineno}: a.{node.attr}")
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value in columns
        ):
            found.append(f'line {node.lineno}: ["{node.slice.value}"]')
    return found


def test_no_renderer_reads_the_analysis_or_spells_its_columns() -> None:
    columns = analysis_columns()
    found = {p.name: hits for p in renderers() if (hits := lookups(p.read_text(), columns))}
    assert found == {}


def test_the_check_sees_both_kinds_of_lookup() -> None:
    source = 'def page(a, g):\n    x = a.speedups\n    return g["concurrency"], g["legend"]\n'
    assert lookups(source, analysis_columns()) == [
        "line 2: a.speedups",
        'line 3: ["concurrency"]',
    ]
