"""One self-contained HTML page: its sections, a table of contents, the stylesheet and
plotly.js inlined once (no network: the page opens from a file on a machine offline)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

from harness.atomic import write_text
from harness.report.html_text import escape

STYLE = """
:root { --ink: #1b1b1b; --muted: #555; --rule: #ddd; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       margin: 0; line-height: 1.45; background: #fafafa; }
header, main { max-width: 1360px; margin: 0 auto; padding: 0 20px; }
header h1 { font-size: 1.5rem; margin: 18px 0 4px; }
header p { color: var(--muted); margin: 0 0 8px; }
nav ol { columns: 3 220px; margin: 8px 0 16px; padding-left: 20px; font-size: 0.92rem; }
section.report-section { background: #fff; border: 1px solid var(--rule); border-radius: 6px;
                         padding: 8px 18px 14px; margin: 14px 0; }
section h2 { font-size: 1.25rem; margin: 10px 0 2px; }
section h3 { font-size: 1.05rem; margin: 16px 0 4px; }
p.subtitle, p.note { color: var(--muted); font-size: 0.9rem; margin: 2px 0 8px; }
p.verdict { font-size: 2.4rem; font-weight: 700; margin: 4px 0; }
ul.bars { columns: 3 260px; font-size: 0.92rem; }
pre.text { font-size: 0.8rem; white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f6f6;
           padding: 8px 10px; border-radius: 4px; margin: 6px 0; }
pre.notice { color: #8a4f00; }
.table-wrap { overflow-x: auto; margin: 6px 0 10px; }
table { border-collapse: collapse; font-size: 0.82rem; }
th, td { border-bottom: 1px solid var(--rule); padding: 3px 8px; text-align: left;
         vertical-align: top; }
th { background: #f0f0f0; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:hover { background: #f3f7ff; }
/* Two fixed columns (one on a narrow screen): a figure is drawn as its <div> is parsed,
   so its column must not change width when the next figure arrives. */
.figure-grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 10px; }
@media (max-width: 1100px) { .figure-grid { grid-template-columns: minmax(0, 1fr); } }
.figure { min-width: 0; }
"""


# Once the page is laid out, every figure to its final width (each was drawn as parsed).
RESIZE = (
    "window.addEventListener('load', () => document.querySelectorAll("
    "'.plotly-graph-div').forEach(d => Plotly.Plots.resize(d)));"
)


@cache
def plotly_js() -> str:
    """plotly.js as shipped in the plotly package (the same version its figures expect)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def html_page(title: str, subtitle: str, sections: Sequence[tuple[str, str, str, str]]) -> str:
    """sections: (id, title, subtitle, body HTML), in reading order."""
    nav = "".join(f'<li><a href="#{escape(i)}">{escape(t)}</a></li>' for i, t, _, _ in sections)
    body = "\n".join(
        f'<section class="report-section" id="{escape(i)}"><h2>{escape(t)}</h2>'
        + (f'<p class="subtitle">{escape(s)}</p>' if s else "")
        + f"{b}</section>"
        for i, t, s, b in sections
    )
    # "</script" inside the inlined library would end its <script> early.
    js = plotly_js().replace("</script", "<\\/script")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style>"
        f'<script type="text/javascript">{js}</script></head>\n<body>'
        f"<header><h1>{escape(title)}</h1><p>{escape(subtitle)}</p>"
        f"<nav><ol>{nav}</ol></nav></header>\n<main>{body}</main>"
        f"<script>{RESIZE}</script></body></html>\n"
    )


def write_page(text: str, out: Path) -> Path:
    """Written whole or not at all (a reader never opens half a page)."""
    write_text(out, text)
    return out
