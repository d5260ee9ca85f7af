"""The PDF report of a run, rebuilt from its folder alone (matplotlib, Agg), and the HTML
report beside it (plotly: html_build.write_html, the same sections from the same lines).

write_pdf draws the pages of one analysis and verdict; harness.finalize decides when
(finalize_run, build_report), so this package never imports the code that calls it.
"""

from harness.report.build import write_pdf

__all__ = ["write_pdf"]
