"""Page furniture shared by every report page: size, titles, text and table pages."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

PAGE = (11.69, 8.27)  # A4 landscape, inches
LINES_PER_PAGE = 46
WRAP = 150
MONO = {"family": "monospace", "size": 7.5}


def new_page(title: str, subtitle: str | None = None) -> Figure:
    fig = plt.figure(figsize=PAGE)
    fig.suptitle(title, fontsize=14, fontweight="bold", x=0.03, ha="left", y=0.975)
    if subtitle:
        fig.text(
            0.03,
            0.93,
            "\n".join(textwrap.wrap(subtitle, 160, break_on_hyphens=False)),
            fontsize=9,
            color="#444444",
            ha="left",
            va="top",
        )
    return fig


def save(pdf: PdfPages, fig: Figure) -> None:
    pdf.savefig(fig)
    plt.close(fig)


def wrap_lines(lines: Sequence[str], width: int = WRAP) -> list[str]:
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out.extend(
            textwrap.wrap(
                line,
                width,
                subsequent_indent=indent,
                drop_whitespace=False,
                replace_whitespace=False,
            )
            or [""]
        )
    return out


def text_pages(
    pdf: PdfPages,
    title: str,
    lines: Sequence[str],
    subtitle: str | None = None,
    first_page_top: float = 0.89,
) -> int:
    """Monospace text over as many pages as it needs; returns the pages written."""
    lines = wrap_lines(lines)
    per_page = LINES_PER_PAGE
    pages = max(1, math.ceil(len(lines) / per_page))
    for p in range(pages):
        chunk = lines[p * per_page : (p + 1) * per_page]
        t = title if pages == 1 else f"{title} ({p + 1}/{pages})"
        fig = new_page(t, subtitle)
        fig.text(
            0.03,
            first_page_top,
            "\n".join(chunk),
            va="top",
            ha="left",
            fontdict=MONO,
            linespacing=1.35,
        )
        save(pdf, fig)
    return pages


@dataclass(frozen=True)
class TextTable:
    """A table's headers and formatted cells, as table_lines drew them."""

    headers: list[str]
    rows: list[list[str]]


class TableLine(str):
    """A line of a fixed-width table that still knows its table: a page's lines are built
    by concatenating lists, and each line keeps this, so the HTML report draws the same
    lines' tables as tables (html_text.py) while the PDF sees plain text."""

    table: TextTable

    def __new__(cls, text: str, table: TextTable) -> TableLine:
        line = super().__new__(cls, text)
        line.table = table
        return line


def table_lines(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A fixed-width text table."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "-" * len(line)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    table = TextTable(list(headers), cells)
    return [TableLine(text, table) for text in out]


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def empty_axes(ax, message: str) -> None:
    ax.text(
        0.5,
        0.5,
        message,
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=9,
        color="#666666",
        wrap=True,
    )
    ax.set_xticks([])
    ax.set_yticks([])


def log2_axis(ax, levels: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(levels))
    ax.set_xticklabels([str(c) for c in levels])
    ax.minorticks_off()
    ax.set_xlim(levels[0] / 1.25, levels[-1] * 1.25)  # every level, even if skipped or missing
