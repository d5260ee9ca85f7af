"""Why an INCOMPLETE verdict is unfinished and the one command that finishes it, and the
cells `--remeasure-invalid` measured again: computed once with the verdict
(harness.analysis.bars.evaluate) and rendered as they are by the terminal, verdict.json,
the PDF's first page and the HTML report.

Each cause of the cells a bar still lacks is named with its count, the range of the
cells' figures for it, the limit they were judged against, and how many of them each
unfinished bar reads: "host busy, 13 cells (pass.speed 6, pass.knee 13): 0.42-0.83 of the
host's CPU time went to other processes, above the limit 0.25".
"""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Callable
from pathlib import Path

from harness.analysis.bar_common import drafter_arms, speed_tasks
from harness.analysis.load import CellData, RunData
from harness.derived.usable import PASSING, Cause
from harness.rundir.remeasure import CauseCount, RemeasuredCell, Unfinished

NAMES = {
    "host_busy": "host busy",
    "client_lag": "client lag",
    "delivered_short": "delivered load short",
    "bursts": "bursts",
    "engine_died": "engine died",
    "gpu_throttled": "GPU throttled",
    "aborted": "aborted for errors",
    "nothing_succeeded": "nothing succeeded",
    "no_per_user_speed": "no per-user speed",
    "not_measured": "not measured",
}


def _span(low: float | None, high: float | None, spec: str) -> str:
    if low is None or high is None:
        return "?"
    a, b = format(low, spec), format(high, spec)
    return a if a == b else f"{a}-{b}"


def cause_text(kind: str, low: float | None, high: float | None, limit: float | None) -> str:
    """What the cells measured for one cause, as their own lines say it."""
    lim = "?" if limit is None else f"{limit:g}"
    texts: dict[str, Callable[[], str]] = {
        "host_busy": lambda: (
            f"{_span(low, high, '.2f')} of the host's CPU time went to other"
            f" processes, above the limit {lim}"
        ),
        "client_lag": lambda: (
            f"the client's lag p99 {_span(low, high, '.1f')} ms, above the limit {lim} ms"
        ),
        "delivered_short": lambda: (
            f"{_span(low, high, '.2f')} of the registered users kept in flight, below {lim}"
        ),
        "bursts": lambda: (
            f"{_span(low, high, '.2f')} of the requests arrived in bursts, above the limit {lim}"
        ),
        "gpu_throttled": lambda: (
            f"the GPU throttled in {_span(low, high, '.0%')} of the"
            " readings (recording.gpu_throttle: remeasure)"
        ),
        "engine_died": lambda: "the engine died during the cell, no attempt measured to its end",
        "aborted": lambda: "aborted at the error-rate limit (recording.error_rate_limit)",
        "nothing_succeeded": lambda: "no measured request succeeded",
        "no_per_user_speed": lambda: "no request with a per-user speed (every token in one read)",
        "not_measured": lambda: "not measured yet (the run stopped before them)",
    }
    return texts[kind]()


def bars_reading(run: RunData, cell: CellData, bars: list[str]) -> list[str]:
    """Which of `bars` read the cell (a check-bar rerun: the check bar alone). A bar that
    judges the best drafter reads the pass levels' speed cells, which pick it."""
    if cell.rerun_of is not None:
        return ["check"] if "check" in bars else []
    study = run.study
    drafters = drafter_arms(study)
    judged = {*drafters, *(study.arm(d).baseline for d in drafters)}
    speed = cell.kind == "speed" and cell.arm in judged and cell.task in speed_tasks(study)
    identity, accuracy = study.bars.pass_.identity, study.bars.pass_.accuracy
    pass_level = speed and cell.concurrency in study.bars.pass_.speed.concurrencies
    # A bar that judges the best drafter needs the pass levels' speed cells to know which.
    picks = {
        "pass.identity": identity is not None and identity.arms == "best_drafter",
        "pass.accuracy": accuracy is not None and accuracy.arms == "best_drafter",
    }
    reads = {
        "pass.speed": pass_level,
        "pass.knee": speed,
        "pass.identity": (
            cell.kind == "identity" and cell.arm in judged or pass_level and picks["pass.identity"]
        ),
        "pass.accuracy": (
            cell.kind == "accuracy"
            and cell.arm in judged
            and accuracy is not None
            and cell.task in accuracy.tasks
            or pass_level
            and picks["pass.accuracy"]
        ),
    }
    return [b for b in bars if reads.get(b)]


def _shown(path: str | Path) -> str:
    """A path as the user would type it here: relative to this folder when inside it."""
    p = Path(path).resolve()
    try:
        p = p.relative_to(Path.cwd())
    except ValueError:
        pass
    return shlex.quote(str(p))


def finish_command(run: RunData, remeasure: bool) -> str:
    """The one command that finishes the run: resume it, measuring again the cells left
    invalid by a cause that passes, with the flags its first invocation needed again."""
    m = run.manifest
    invoked = m.runner.invoked_as if m.runner is not None else None
    study_file = _shown(m.study_file) if m.study_file else "STUDY.yaml"
    parts = [invoked or f"specbench run {study_file}", "--resume", _shown(run.run_dir)]
    if remeasure:
        parts.append("--remeasure-invalid")
    if any(d.unpinned is not None or d.open_markers for d in m.deviations):
        parts.append("--allow-unpinned")
    if m.sharding is not None:
        parts.append(f"--gpus {m.sharding.gpus}")
    return " ".join(parts)


def unfinished(run: RunData, incomplete: list[str], rerun_states: list[str]) -> Unfinished:
    """Each cause of the cells an unfinished verdict lacks, and how to finish it.
    `incomplete`: the bars left incomplete ("check" for an unresolved check bar);
    `rerun_states`: the check bar's rerun states (missing, invalid, agrees, disagrees)."""
    by_cause: dict[str, list[tuple[CellData, Cause]]] = {}
    for cell in run.cells.values():
        if cell.status not in ("invalid", "missing"):
            continue
        for cause in cell.causes or (Cause("not_measured"),):
            by_cause.setdefault(cause.kind, []).append((cell, cause))
    counts = []
    for kind in (k for k in NAMES if k in by_cause):
        hits = by_cause[kind]
        values = [c.value for _, c in hits if c.value is not None]
        limits = [c.limit for _, c in hits if c.limit is not None]
        per_bar: dict[str, int] = {}
        for cell, _ in hits:
            for bar in bars_reading(run, cell, incomplete):
                per_bar[bar] = per_bar.get(bar, 0) + 1
        low, high = (min(values), max(values)) if values else (None, None)
        limit = limits[0] if limits else None
        n = len(hits)
        read = ", ".join(f"{b} {k}" for b, k in per_bar.items()) or "read by no bar"
        line = (
            f"{NAMES[kind]}, {n} cell{'s' if n != 1 else ''} ({read}):"
            f" {cause_text(kind, low, high, limit)}"
        )
        passes = kind in PASSING or kind == "not_measured"
        if not passes:
            line += (
                " (not measured again by --remeasure-invalid: the engine's or the"
                " study's doing, which a new measurement would meet again)"
            )
        counts.append(
            CauseCount(
                cause=kind,
                cells=[c.id for c, _ in hits],
                low=low,
                high=high,
                limit=limit,
                per_bar=per_bar,
                passes=passes,
                line=line,
            )
        )
    lines = [c.line for c in counts]
    if "disagrees" in rerun_states:
        lines.append(
            "check: a baseline rerun disagrees with the original measurement, so the"
            " result is not accepted; measuring again does not change that"
        )
    remeasure = any(c.passes and c.cause not in ("not_measured", "engine_died") for c in counts)
    if any(c.passes for c in counts) or "missing" in rerun_states:
        command: str | None = finish_command(run, remeasure)
        lines.append(f"to finish the run: {command}")
    else:
        command = None
        left = (
            "what is left is the engine's or the study's to fix (the cell lines say what)"
            if counts
            else "no cell is missing or invalid (the bars' lines say what is left)"
        )
        lines.append(f"no command finishes the run as registered: {left}")
    return Unfinished(causes=counts, command=command, lines=lines)


def _ago(seconds: float) -> str:
    minutes = abs(seconds) / 60
    amount = f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"
    return f"{amount} {'earlier' if seconds >= 0 else 'later'}"


def remeasured_cells(run: RunData) -> list[RemeasuredCell]:
    """Each cell `--remeasure-invalid` measured again: why it had been invalid, when it
    was measured again, what it is now, and its partners kept as measured."""
    out = []
    for r in run.manifest.remeasured:
        cell = run.cells.get(r.cell)
        measured = sum(
            1 for a in (cell.attempts if cell else []) if a.status in ("complete", "invalid")
        )
        after = measured - r.attempts_before
        status = cell.status if cell is not None else "missing"
        when = datetime.datetime.fromtimestamp(r.when, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        now = {
            "complete": "now valid",
            "invalid": f"still invalid ({cell.reason})" if cell else "still invalid",
        }.get(status, "not measured yet")
        line = (
            f"{r.cell}: invalid ({r.reason}); measured again from {when} with a fresh"
            f" budget: {after} attempt{'s' if after != 1 else ''}, {now}"
        )
        end = cell.complete.finished_wall if cell and cell.complete else None
        for name in r.partners:
            partner = run.cells.get(name)
            done = partner.complete.finished_wall if partner and partner.complete else None
            gap = f", {_ago(end - done)}" if end is not None and done is not None else ""
            line += f"; read against {name}, kept as measured{gap}"
        out.append(
            RemeasuredCell(
                cell=r.cell,
                when=r.when,
                causes=r.causes,
                reason=r.reason,
                attempts_before=r.attempts_before,
                attempts_after=after,
                status=status,
                partners=r.partners,
                line=line,
            )
        )
    return out
