"""Start an arm's engine (or attach to its endpoint) and return it once it really serves.

start_engine() launches the arm's command in a new process group with the arm's
environment, logs to the run folder, records it (`on_spawn`) the moment it exists, and
waits until it is ready (harness/engines/running/readiness.py: the port, the readiness path, the
served model, one warm-up generation, the speculation counter). If the process exits or
the timeout passes first, the error carries the command and the last 40 lines of its
log. Attach arms name an endpoint the user runs: it is checked
(harness/engines/running/attach.py), never started or stopped.

The pieces, one job each: the handle and its stop (engine_process.py), readiness
probes (readiness.py), the log's lines (engine_log.py), attach checks (attach.py), the
version probe (versions.py), the process group and its guard (process.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from harness.engines import get_engine_kind
from harness.engines.install.versions import probe_version
from harness.engines.launch.base import EngineKind, expand_arm
from harness.engines.running.attach import attach_problem
from harness.engines.running.engine_log import redact_secrets
from harness.engines.running.engine_process import EngineProcess, stop_engines_on_sigterm, track
from harness.engines.running.process import EngineGuard, free_port, port_in_use, spawn, stop_group
from harness.engines.running.readiness import wait_ready
from harness.errors import SpecbenchError
from harness.host_gpus import gpu_description
from harness.rundir.engines import EngineInfo
from harness.testengine.spec import ENGINE_SESSION_VARIABLE
from harness.weights.record import hub_environment

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study


def start_engine(
    arm: Arm,
    study: Study,
    log_dir: Path,
    *,
    port: int | None = None,
    on_spawn: Callable[[EngineInfo], None] | None = None,
    session: int | None = None,
) -> EngineProcess:
    """Start (or attach to) one arm's engine and return it once it serves.

    `session` (a repeated session's number) is handed to the engine as
    SPECBENCH_ENGINE_SESSION: real engines ignore it; the scripted engine takes its
    declared per-session speed factor from it.

    `on_spawn(info)` is called as soon as the process exists (pid, group, port), before
    the minutes a GPU engine takes to load: a run records it there, so an engine still
    starting when the harness dies is known to the next attempt."""
    if arm.attach is not None:
        return attach_engine(arm, study)
    kind = get_engine_kind(arm.engine)
    arm, missing = expand_arm(arm)
    if missing:
        raise SpecbenchError(
            f"arm {arm.name!r}: environment variables used in the arm are not set: "
            + ", ".join(missing)
        )
    launch = arm.launch
    assert launch is not None  # Arm: exactly one of launch and attach
    host = launch.host
    port = port or launch.port or free_port(host)
    if port_in_use(host, port):
        raise SpecbenchError(
            f"arm {arm.name!r}: port {port} on {host} is already in use -- stop whatever holds it,"
            " or set launch.port to a free port (leave it unset to pick one)"
        )
    cmd = kind.command(arm, study, host, port)
    # Hub checkpoints load offline from the fetched cache; the arm's own env still wins.
    overrides = {**hub_environment(study, arm), **kind.environment(arm)}
    if session is not None:
        overrides[ENGINE_SESSION_VARIABLE] = str(session)
    log_dir = Path(log_dir)
    log_path = log_dir / f"engine-{arm.name}.log"
    started = time.time()
    info = EngineInfo(
        arm=arm.name,
        kind=kind.name,
        metrics_dialect=kind.dialect_for(arm),
        command=cmd,
        env_overrides=redact_secrets(overrides),
        settings=kind.resolved_settings(arm, study),
        gpu=gpu_description(),
        started_wall=started,
        started_iso=dt.datetime.fromtimestamp(started, dt.UTC).isoformat(),
        launched=True,
        log_path=str(log_path),
        host=host,
        port=port,
        base_url=f"http://{_url_host(host)}:{port}",
        served_model=kind.served_model(study),
    )
    stop_engines_on_sigterm()
    try:
        popen = spawn(cmd, {**os.environ, **overrides}, log_path)
    except OSError as err:
        raise SpecbenchError(
            f"arm {arm.name!r}: cannot start the engine: {err}", f"command: {shlex.join(cmd)}"
        ) from None
    info.pid = info.pgid = popen.pid  # the leader of its own session
    try:
        guard = EngineGuard(popen.pid, log_path, launch.stop_grace_s)
    except BaseException:
        stop_group(popen, launch.stop_grace_s)
        raise
    info.guard_pid = guard.pid
    engine = EngineProcess(
        arm=arm,
        kind=kind,
        info=info,
        request_fields=kind.request_fields(arm, study),
        popen=popen,
        host=host,
        port=port,
        stop_grace_s=launch.stop_grace_s,
        guard=guard,
    )
    track(engine)
    version: dict[str, str | None] = {}
    prober = threading.Thread(
        target=lambda: version.update(v=probe_version(kind, arm)[0]), daemon=True
    )
    prober.start()

    def engine_version() -> str | None:
        prober.join(timeout=120)
        return version.get("v")

    try:
        if on_spawn is not None:
            on_spawn(info)
        wait_ready(engine, launch.startup_timeout_s, started, engine_version)
    except BaseException:  # a failed start, a timeout, or Ctrl-C: take the engine down
        with contextlib.suppress(SpecbenchError):
            engine.stop()
        raise
    info.ready_after_s = round(time.time() - started, 3)
    info.version = engine_version()
    # What the engine chose by itself (async scheduling, CUDA graphs...), from its log.
    with contextlib.suppress(OSError):
        log = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        info.settings = {**info.settings, **kind.chosen_settings(arm, log, cmd)}
    with contextlib.suppress(OSError):
        (log_dir / f"engine-{arm.name}.json").write_text(info.model_dump_json(indent=2) + "\n")
    return engine


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def attach_engine(arm: Arm, study: Study) -> EngineProcess:
    """An attach arm's endpoint as an engine handle, once it passes attach_problem."""
    attach = arm.attach
    assert attach is not None  # start_engine's branch
    now = time.time()
    version = None
    with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
        version = httpx.get(attach.base_url + "/version", timeout=5).json().get("version")
    info = EngineInfo(
        arm=arm.name,
        kind=arm.engine,
        metrics_dialect=attach.metrics,
        version=version,
        started_wall=now,
        started_iso=dt.datetime.fromtimestamp(now, dt.UTC).isoformat(),
        launched=False,
        base_url=attach.base_url,
        served_model=attach.served_model,
    )
    kind = _request_kind(arm)
    fields = kind.request_fields(arm, study) if kind is not None else {}
    engine = EngineProcess(arm=arm, kind=kind, info=info, request_fields=fields)
    problem = attach_problem(arm, study)
    if problem:
        raise SpecbenchError(f"arm {arm.name!r}: {problem}")
    return engine


def _request_kind(arm: Arm) -> EngineKind | None:
    """The kind whose request fields suit an attached endpoint: the arm's own if it
    speaks the endpoint's metrics dialect, else the plain kind of that dialect."""
    from harness.engines import ENGINE_KINDS

    assert arm.attach is not None
    own = ENGINE_KINDS.get(arm.engine)
    if own is not None and own.dialect_for(arm) == arm.attach.metrics:
        return own
    return ENGINE_KINDS.get(arm.attach.metrics)


__all__ = ["EngineInfo", "EngineProcess", "attach_engine", "start_engine"]
