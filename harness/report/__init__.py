"""The PDF report of a run, rebuilt from its folder alone (matplotlib, Agg)."""

from harness.report.build import build_report

__all__ = ["build_report"]
