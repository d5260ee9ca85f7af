"""The steps `run`, `rerun-baseline` and `serve` share around the executor: the study as
executed on this host, and a run finished with its verdict said."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from harness.engines.launch.base import expand_study
from harness.engines.probe.preflight import require_preflight, settings_lines
from harness.prereg.schema import Study
from harness.rundir.verdict import Verdict


def executed_study(
    study: Study, arms: list[str] | None = None, say: Callable[[str], None] | None = None
) -> Study:
    """${VAR} expanded (the machine's business, not the study's: after the seal is taken
    over the text as written), the arms (default: all) pre-flighted before any engine
    starts and, with `say`, what each resolves to (drafter precision, ...) said."""
    executed = expand_study(study)
    require_preflight(executed, arms)
    if say is not None:
        for line in settings_lines(executed, arms):
            say(line)
    return executed


def finish_run(root: Path, study: Study, console: Console, report: Path | None = None) -> Verdict:
    """Tables, verdict and (with `report`) the PDF from one analysis, said: the verdict,
    each bar, each cause of an unfinished one with the command to finish it, the files."""
    from harness.finalize import finalize_run  # the analysis loads only when a run ends

    done = finalize_run(root, study, report=report)
    verdict = done.verdict
    console.print(f"[bold]verdict: {verdict.verdict}[/bold]  ({root / 'verdict.json'})")
    for bar in verdict.bars:
        console.print(f"  {bar.name}: {bar.status}")
    for line in verdict.reasons:
        console.print(f"  {line}", markup=False, soft_wrap=True)
    for path in done.tables:
        console.print(f"table: {path}")
    if done.report is not None:
        console.print(f"report: {done.report}")
    if done.html is not None:
        console.print(f"html report: {done.html}")
    return verdict
