"""The environment page: the run's seal, engines, settings, telemetry, deviations and smoke."""

from __future__ import annotations

import pandas as pd

from harness.analysis.tables import Analysis
from harness.numbers import is_nan
from harness.report.layout import table_lines
from harness.report.views.verdict import (
    checkpoint_lines,
    deviation_lines,
    short_json,
    smoke_detail,
    wall_clock,
)
from harness.rundir.engines import RunGpuTelemetry
from harness.rundir.verdict import Verdict


def environment_lines(a: Analysis, verdict: Verdict) -> list[str]:
    m = a.run.manifest
    study = a.run.study
    lines = [
        f"run id            {a.run.run_id}",
        f"seal              {m.seal}",
        (f"study             {study.title} (registered {study.registered}; file {m.study_file})"),
        f"specbench commit  {m.specbench_commit}",
        (
            f"status            {m.status}   started {wall_clock(m.started_wall)}"
            f"   ended {wall_clock(m.ended_wall)}"
        ),
        (
            f"hardware (study)  {study.hardware.count} x {study.hardware.gpu};"
            f" model {study.model.id}@{study.model.revision}"
        ),
        "",
        "host:",
    ]
    host = m.host.model_dump(exclude_none=True) if m.host else {}
    lines += [f"  {k}: {short_json(v, 200)}" for k, v in host.items()]
    lines += ["", f"GPU telemetry: {_telemetry_line(m.gpu_telemetry)}"]
    lines += ["", "engines (per arm, each start):"]
    for arm, infos in m.engines.items():
        for info in infos:
            keys = {"kind", "version", "gpu", "started_wall", "started_for", "command"}
            shown = info.model_dump(include=keys)
            lines.append(f"  {arm}: {short_json(shown, 300)}")
    lines += ["", "arm settings the engine would otherwise pick (as each engine started):"]
    lines += _settings_lines(a) or ["  none"]
    lines += ["", "checkpoints (commit and weight sha256):", *checkpoint_lines(m)]
    lines += ["", "engine environments (full package lists in manifest.json):"]
    for python, env in m.engine_environments.items():
        held = (
            f"{len(env.packages)} packages"
            if env.packages is not None
            else f"not listed: {env.error}"
        )
        lines.append(
            f"  {python}: {env.pin or 'not a pinned venv'}; {held}; arms {', '.join(env.arms)}"
        )
    for s in m.stale_engines:
        lines.append(
            f"  stale engine of {s.arm} (pid {s.pid}, port {s.port})"
            f" from an earlier attempt: {s.action}"
        )
    lines += ["", *smoke_detail(a.run)]
    lines += ["", "deviations from the registered study:"]
    lines += deviation_lines(m) or ["  none"]
    stop = m.stop
    lines += [
        "",
        (
            f"stop bar at the end of stage 1: {short_json(stop.fired) if stop else '-'}"
            f" (judged {wall_clock(stop.judged_wall) if stop else '-'})"
        ),
    ]
    if stop and stop.fired:
        lines.append(
            "  the stop bar fired: the remaining speed cells were skipped;"
            " identity and accuracy still ran"
        )
    lines += ["", f"skipped cells ({len(m.skipped)}):"]
    lines += [f"  {s.cell}: {s.reason}" for s in m.skipped] or ["  none"]
    lines += ["", f"baseline reruns by the check bar ({len(m.reruns)}); both runs are kept:"]
    lines += [f"  {r.cell} of {r.of}: {r.reason}" for r in m.reruns] or ["  none"]
    for r in verdict.reruns:
        lines.append(
            f"  {r.cell}: {r.state}"
            + (f" ({r.relative_difference:+.1%})" if r.relative_difference is not None else "")
        )
    if m.failed_cells:
        lines += ["", "cells that failed every attempt:"]
        lines += [f"  {f.cell}: {f.reason}" for f in m.failed_cells]
    lines += ["", "cells:"]
    first = pd.Series([r.status for r in a.cell_rows(first_measured=True)], dtype=object)
    status = first.value_counts().to_dict()
    lines.append("  " + ", ".join(f"{n} {s}" for s, n in status.items()))
    bad = a.cell_rows(status=("invalid", "missing"))
    lines += (
        table_lines(["cell", "status", "reason"], [[r.cell_id, r.status, r.reason] for r in bad])
        if bad
        else []
    )
    lines += _burst_lines(a)
    return lines


def _settings_lines(a: Analysis) -> list[str]:
    """Each arm's resolved settings (drafter precision, SGLang's admission delay): from
    its last engine start in the manifest, else resolved from the study (never started)."""
    from harness.engines import ENGINE_KINDS

    engines = a.run.manifest.engines
    lines = []
    for arm in a.run.study.arms:
        started = engines.get(arm.name, [])
        settings, where = (started[-1].settings if started else {}), ""
        kind = ENGINE_KINDS.get(arm.engine)
        if not started and kind is not None and arm.attach is None:
            settings, where = kind.resolved_settings(arm, a.run.study), " (no start recorded)"
        lines += [
            f"  {arm.name}: {key.replace('_', ' ')}: {value}{where}"
            for key, value in settings.items()
        ]
    return lines


def _telemetry_line(entry: RunGpuTelemetry | None) -> str:
    if entry is None:
        return "not recorded (no engine started, or a run from before telemetry)"
    if not entry.recorded:
        return entry.reason or "no GPU telemetry"
    gpus = ", ".join(
        f"GPU {g.get('index')} {g.get('name')} ({g.get('uuid')})" for g in entry.gpus or []
    )
    return f"recorded through NVML (driver {entry.driver_version}; {gpus})"


def _burst_lines(a: Analysis) -> list[str]:
    """Per speed cell, the share of requests that arrived in bursts (no per-user speed)."""
    speed = [r for r in a.cell_rows(kinds=("speed",)) if not is_nan(r.burst_share)]
    if not speed:
        return []
    limit = a.run.study.recording.max_burst_share
    rows = [
        [
            r.cell_id,
            r.status,
            f"{r.burst_share:.2f}",
            "" if is_nan(bound := r.client_stamp_bound_p99_ms) else f"{bound:.1f}",
        ]
        for r in speed
    ]
    return [
        "",
        f"bursts: share of a speed cell's requests with most tokens from several steps under one stamp"
        f" (invalid above {limit:g}):",
        *table_lines(["cell", "status", "burst share", "stamp bound p99 ms"], rows),
    ]
