"""A PDF text page's lines as HTML: each fixed-width table (layout.table_lines) as an
HTML table, the lines between as preformatted text, so the page reads the same as the
PDF's and the tables sort by eye on a laptop screen."""

from __future__ import annotations

import html
from collections.abc import Sequence

from harness.report.layout import TableLine, TextTable


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def table_html(
    headers: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[str] = ()
) -> str:
    """An HTML table; cells are text already formatted (numbers right-aligned by column)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"num" if h in numeric else ""}">{escape(v)}</td>'
            for h, v in zip(headers, row, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    return (
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _numeric_columns(t: TextTable) -> list[str]:
    def number(v: str) -> bool:
        try:
            float(v.replace(",", "").rstrip("%x"))
        except ValueError:
            return v == "-"
        return True

    return [h for i, h in enumerate(t.headers) if t.rows and all(number(r[i]) for r in t.rows)]


def lines_html(lines: Sequence[str]) -> str:
    """Text between tables as <pre>, each table once as an HTML table."""
    out: list[str] = []
    text: list[str] = []
    shown: set[int] = set()

    def flush() -> None:
        while text and not text[-1].strip():
            text.pop()
        if any(t.strip() for t in text):
            out.append(f'<pre class="text">{escape(chr(10).join(text))}</pre>')
        text.clear()

    for line in lines:
        if isinstance(line, TableLine):
            if id(line.table) not in shown:
                shown.add(id(line.table))
                flush()
                t = line.table
                out.append(table_html(t.headers, t.rows, _numeric_columns(t)))
            continue
        if not text and not line.strip():
            continue
        text.append(str(line))
    flush()
    return "\n".join(out)
