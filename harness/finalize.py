"""One way to finish a run: analyse its folder once, write the tables and the verdict, and
(when asked) the PDF report and the HTML one beside it from that same analysis and verdict.

`specbench run`, `analyse`, `report` and `rerun-baseline` all end here, so whatever
finished a run, its folder holds the same files: verdict.json, cells.parquet|csv and
speedups.parquet|csv.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.analysis.bars import write_verdict
from harness.analysis.tables import Analysis, analyse, write_tables
from harness.prereg.schema import Study
from harness.rundir.verdict import Verdict

# A command that measures (`run`, `rerun-baseline`) exits 0 with a complete answer
# (PASS, FAIL, STOP) and this with an INCOMPLETE verdict, which a script can tell apart
# from both a complete answer and a failed run (1) or a bad invocation (2).
EXIT_INCOMPLETE = 3


def verdict_exit(verdict: Verdict) -> int:
    return EXIT_INCOMPLETE if verdict.verdict == "INCOMPLETE" else 0


@dataclass(frozen=True)
class FinishedRun:
    analysis: Analysis
    verdict: Verdict
    tables: list[Path]
    report: Path | None = None
    pages: int | None = None
    html: Path | None = None  # the HTML report, beside the PDF

    @property
    def root(self) -> Path:
        return self.analysis.run.run_dir

    def with_report(self, out_pdf: str | Path) -> FinishedRun:
        """The PDF report of this same analysis and verdict (never judged twice), and the
        HTML report beside it (reports/<run>.pdf and reports/<run>.html)."""
        from harness.report.build import write_pdf
        from harness.report.html_build import html_path, write_html

        out = Path(out_pdf)
        pages = write_pdf(self.analysis, self.verdict, out)
        html = write_html(self.analysis, self.verdict, html_path(out))
        return FinishedRun(self.analysis, self.verdict, self.tables, out, pages, html)


def finalize_run(
    run_dir: str | Path, study: Study | None = None, report: str | Path | None = None
) -> FinishedRun:
    """Tables and verdict.json into the run folder; the report too when `report` names
    the PDF. `study` overrides the folder's study.json (the runner's, as executed)."""
    analysis = analyse(run_dir, study)
    tables = write_tables(analysis)
    verdict = write_verdict(analysis.run, analysis=analysis)
    done = FinishedRun(analysis, verdict, tables)
    return done.with_report(report) if report is not None else done


def build_report(run_dir: str | Path, out_pdf: str | Path) -> Path:
    """finalize_run with a report: tables, verdict.json and the PDF at out_pdf."""
    done = finalize_run(run_dir, report=out_pdf)
    assert done.report is not None
    return done.report
