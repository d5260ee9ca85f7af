"""Start an arm's engine, wait until it really serves, and stop it leaving nothing behind.

start_engine() launches the arm's command in a new process group with the arm's
environment, logs to the run folder, and waits for the port, /health, the
served model and one warm-up generation. If the process exits or the timeout
passes first, the error carries the command and the last 40 lines of its log.
Attach arms name an endpoint the user runs: it is checked, never started or stopped.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import httpx
from pydantic import BaseModel, ConfigDict

from harness.dialects import Dialect
from harness.engines import get_engine_kind
from harness.engines.base import EngineKind, expand_arm, parse_version_output
from harness.engines.drafting import wait_for_drafting
from harness.engines.metrics import scrape_metrics
from harness.engines.process import (
    EngineGuard,
    descendants,
    free_port,
    port_in_use,
    spawn,
    stop_group,
    tail_lines,
    wait_port_free,
)
from harness.errors import SpecbenchError
from harness.testengine.spec import ENGINE_SESSION_VARIABLE
from harness.tls import shared_ssl_context
from harness.weights.record import hub_environment

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study

LOG_TAIL_LINES = 40
WARMUP_PROMPT = "Say hello."
# How often a starting engine's port and readiness path are tried: a refused connection
# costs microseconds, and a run starts engines many times (the scripted one is ready
# in under a second, so a 0.5 s poll was a third of its start).
READY_POLL_S = 0.1
# SGLang counts a request's verify calls as it finishes, which can be a moment after its
# last chunk left: a drafter arm's counter gets this long to appear after the warm-up.
SPEC_COUNTER_GRACE_S = 5.0


class EngineInfo(BaseModel):
    """What the manifest records about one engine process."""

    model_config = ConfigDict(extra="forbid")

    arm: str
    kind: str
    metrics_dialect: Dialect
    version: str | None = None
    command: list[str] = []
    env_overrides: dict[str, str] = {}
    # EngineKind.resolved_settings: the drafter's precision, SGLang's admission delay.
    settings: dict[str, str] = {}
    gpu: str | None = None
    started_wall: float  # time.time() when started (or attached)
    started_iso: str
    ready_after_s: float | None = None
    launched: bool
    log_path: str | None = None
    pid: int | None = None
    # What finds a stale engine of this run later (harness/engines/stale.py): its
    # process group (the engine leads its own session), where it listens, and the
    # guard that stops the group if the harness dies.
    pgid: int | None = None
    host: str | None = None
    port: int | None = None
    guard_pid: int | None = None
    base_url: str
    served_model: str


class EngineProcess:
    """A running engine (or an attached endpoint). Use as a context manager."""

    def __init__(
        self,
        *,
        arm: Arm,
        kind: EngineKind | None,
        info: EngineInfo,
        request_fields: dict[str, Any],
        popen: subprocess.Popen | None = None,
        host: str | None = None,
        port: int | None = None,
        stop_grace_s: float = 30.0,
        guard: EngineGuard | None = None,
    ) -> None:
        self.arm = arm
        self.kind = kind
        self.info = info
        self.request_fields = request_fields
        self._popen = popen
        self._host = host
        self._port = port
        self._grace = stop_grace_s
        self._guard = guard
        self._stopped = popen is None

    @property
    def base_url(self) -> str:
        return self.info.base_url

    @property
    def metrics_url(self) -> str:
        return self.base_url + "/metrics"

    @property
    def served_model(self) -> str:
        return self.info.served_model

    @property
    def metrics_dialect(self) -> Dialect:
        return self.info.metrics_dialect

    @property
    def log_path(self) -> Path | None:
        return Path(self.info.log_path) if self.info.log_path else None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def exit_code(self) -> int | None:
        """The engine process's exit code once it has exited (None while running or attached)."""
        return self._popen.poll() if self._popen is not None else None

    def alive(self) -> bool:
        if self._popen is not None:
            return not self._stopped and self._popen.poll() is None
        try:  # attached: alive while it answers
            return httpx.get(self.base_url + "/v1/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, n: int = LOG_TAIL_LINES) -> list[str]:
        return tail_lines(self.log_path, n) if self.log_path else []

    def stop(self) -> None:
        """SIGTERM the group, SIGKILL after the grace period, then verify the port is
        free and no process is left. Does nothing for attached endpoints."""
        if self._stopped or self._popen is None:
            return
        self._stopped = True
        _LIVE.discard(self)
        try:
            left = stop_group(self._popen, self._grace)
        finally:
            if self._guard is not None:  # nothing left for it to stop
                self._guard.release()
        problems = []
        if left:
            problems.append("processes still alive after SIGKILL: " + ", ".join(str(p.pid) for p in left))
        if self._host and self._port and not wait_port_free(self._host, self._port, 15):
            problems.append(f"port {self._port} on {self._host} is still in use")
        if problems:
            raise SpecbenchError(f"arm {self.arm.name!r}: engine did not stop cleanly", *problems)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.stop()
        except SpecbenchError:
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        state = "attached" if self._popen is None else ("running" if self.alive() else "stopped")
        return f"<EngineProcess {self.arm.name} {self.info.kind} {self.base_url} {state}>"


# Engines this interpreter launched and has not stopped: stopped at exit, so an
# uncaught error never leaves an engine holding a port and gigabytes of memory.
_LIVE: set[EngineProcess] = set()


@atexit.register
def _stop_leftovers() -> None:
    for engine in list(_LIVE):
        with contextlib.suppress(Exception):
            engine.stop()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _stop_engines_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C, so `finally`, context managers and the atexit
    hook stop our engines (they run in their own session and would outlive us).
    Only from the main thread, and only where nobody installed a handler."""
    main = threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


def gpu_description() -> str | None:
    """nvidia-smi's view of the GPUs, where there is one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return "; ".join(lines) if out.returncode == 0 and lines else None


def probe_version(kind: EngineKind, arm: Arm, timeout_s: float = 300) -> tuple[str | None, str]:
    """(version, output) from the kind's version command; version None on failure."""
    try:
        cmd = kind.version_command(arm)
    except ValueError as err:
        return None, str(err)
    try:
        out = subprocess.run(
            cmd,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return None, f"{cmd[0]}: not found"
    except PermissionError:
        return None, f"{cmd[0]}: not executable"
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout_s:.0f} s"
    text = (out.stdout or "") + (out.stderr or "")
    if out.returncode != 0:
        return None, text
    return parse_version_output(out.stdout or ""), text


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
        return _attach(arm, study)
    kind = get_engine_kind(arm.engine)
    arm, missing = expand_arm(arm)
    if missing:
        raise SpecbenchError(
            f"arm {arm.name!r}: environment variables used in the arm are not set: "
            + ", ".join(missing)
        )
    launch = arm.launch
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
    _stop_engines_on_sigterm()
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
    _LIVE.add(engine)
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
        _wait_ready(engine, launch.startup_timeout_s, started, engine_version)
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


_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY|CREDENTIAL", re.IGNORECASE)


def redact_secrets(env: dict[str, str]) -> dict[str, str]:
    """The environment as the manifest records it: secret-looking values hidden."""
    return {k: ("<redacted>" if _SECRET_NAME.search(k) else v) for k, v in env.items()}


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


_ERROR_LINE = re.compile(r"\b\w*(Error|Exception)\b")


def engine_error_line(lines: list[str]) -> str | None:
    """The engine's own last error line in a log tail (with pydantic's `[type=...]`
    detail when there is one), or None."""
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if _ERROR_LINE.search(line) and not line.startswith(("File ", "Traceback")):
            detail = next((x.strip() for x in lines[i + 1 :] if "[type=" in x), None)
            if detail and len(detail) > 240:
                detail = "..." + detail[-240:]  # keep the end: [type=..., input_value=...]
            return line + (f" | {detail}" if detail else "")
    return None


_LEVEL_LINE = re.compile(r"\b(WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
_ACCESS_LINE = re.compile(r'"(GET|POST|PUT|DELETE|HEAD|OPTIONS) /')


def relevant_log_line(lines: list[str]) -> str | None:
    """The line of a log tail that best says what the engine did last: its own last
    error line, else its last warning, else its last line that is not an HTTP access
    line (those only say a request came); None for an empty log."""
    error = engine_error_line(lines)
    if error:
        return error
    kept = [line.strip() for line in lines if line.strip()]
    for line in reversed(kept):
        if _LEVEL_LINE.search(line):
            return line
    for line in reversed(kept):
        if not _ACCESS_LINE.search(line):
            return line
    return None


def _fail(engine: EngineProcess, reason: str) -> SpecbenchError:
    tail = engine.log_tail()
    error = engine_error_line(tail)
    if error:
        reason += f"; the engine says: {error}"
    lines = [
        f"arm {engine.arm.name!r} ({engine.info.kind}): {reason}",
        f"command: {shlex.join(engine.info.command)}",
        f"log: {engine.info.log_path}",
        f"last {LOG_TAIL_LINES} lines of the log:",
    ]
    lines += [f"  | {line}" for line in tail] if tail else ["  (the log is empty)"]
    return SpecbenchError(*lines)


def _wait_ready(engine: EngineProcess, timeout_s: float, started: float,
                version: Callable[[], str | None]) -> None:
    kind = engine.kind
    assert kind is not None and engine._popen is not None
    deadline = started + timeout_s
    phase = "the port to open"
    # The shared TLS context: httpx builds a CA store per client otherwise (~0.1 s a start).
    with httpx.Client(timeout=10, verify=shared_ssl_context()) as client:
        while True:
            code = engine._popen.poll()
            if code is not None:
                raise _fail(engine, f"the engine exited with code {code} while starting")
            if time.time() > deadline:
                raise _fail(engine, f"not ready after {timeout_s:.0f} s (waiting for {phase})")
            try:
                response = client.get(engine.base_url + kind.readiness_path)
            except httpx.TransportError:
                time.sleep(READY_POLL_S)
                continue
            phase = f"{kind.readiness_path} to answer 200"
            if response.status_code == 200:
                break
            time.sleep(READY_POLL_S)
        remaining = max(deadline - time.time(), 5.0)
        _check_served_model(engine, client)
        _warm_up(engine, client, remaining)
        _check_speculation_series(engine, client, version)


def _check_served_model(engine: EngineProcess, client: httpx.Client) -> None:
    try:
        response = client.get(engine.base_url + "/v1/models")
        ids = [m.get("id") for m in response.json().get("data", [])]
    except (httpx.HTTPError, ValueError, AttributeError) as err:
        raise _fail(engine, f"/v1/models did not answer usefully: {err}") from None
    if engine.served_model not in ids:
        raise _fail(engine, f"serves {ids}, not the registered model {engine.served_model!r}")


def _warm_up(engine: EngineProcess, client: httpx.Client, timeout_s: float) -> None:
    """One streamed greedy generation with the same engine fields the load driver sends;
    all four tokens are generated (no early EOS), so a drafter arm verifies drafts."""
    body = {
        "model": engine.served_model,
        "messages": [{"role": "user", "content": WARMUP_PROMPT}],
        "max_tokens": 4,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        **engine.request_fields,
    }
    chunks = 0
    done = False
    try:
        with client.stream(
            "POST", engine.base_url + "/v1/chat/completions", json=body, timeout=timeout_s
        ) as response:
            if response.status_code != 200:
                detail = response.read().decode("utf-8", "replace")[:500]
                raise _fail(engine, f"warm-up request failed: HTTP {response.status_code}: {detail}")
            for line in response.iter_lines():
                if line.startswith("data:"):
                    chunks += 1
                    done = done or line.strip() == "data: [DONE]"
    except httpx.HTTPError as err:
        raise _fail(engine, f"warm-up request failed: {type(err).__name__}: {err}") from None
    if not done or chunks < 2:
        raise _fail(engine, f"warm-up stream ended early ({chunks} chunks, [DONE] seen: {done})")


def _check_speculation_series(engine: EngineProcess, client: httpx.Client,
                              version: Callable[[], str | None]) -> None:
    """After the warm-up, a drafter arm must export its speculation counter and an arm
    without a drafter must not (harness/engines/drafting.py): otherwise the engine is not
    running the registered arm, or every cell of hours of them would end with no
    acceptance figure."""
    dialect = engine.metrics_dialect
    drafter = engine.arm.drafter is not None

    def read() -> tuple[float | None, str | None]:
        result = scrape_metrics(engine.metrics_url, dialect, client=client)
        if not result.ok:
            raise _fail(engine, f"/metrics is unusable: {result.error}")
        return result.snapshot.drafts, None

    reading = wait_for_drafting(read, dialect, drafter=drafter, over="its warm-up",
                                wait_s=SPEC_COUNTER_GRACE_S if drafter else 0.0, poll_s=0.25)
    if reading.problem is None:
        return
    if drafter:
        # One line: the metric, the engine and its version say what to fix.
        raise SpecbenchError(
            f"arm {engine.arm.name!r}: {engine.info.kind} {version() or '(version unknown)'}"
            f" {reading.problem}; its engine was stopped (log: {engine.info.log_path})")
    raise _fail(engine, reading.problem)


def _attach(arm: Arm, study: Study) -> EngineProcess:
    attach = arm.attach
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

    own = ENGINE_KINDS.get(arm.engine)
    if own is not None and own.dialect_for(arm) == arm.attach.metrics:
        return own
    return ENGINE_KINDS.get(arm.attach.metrics)


def _same_model(names: set[str], registered: set[str]) -> bool:
    if names & registered:
        return True
    base = {n.rstrip("/").rsplit("/", 1)[-1].lower() for n in names}
    return bool(base & {r.rstrip("/").rsplit("/", 1)[-1].lower() for r in registered})


def attach_problem(arm: Arm, study: Study, timeout_s: float = 10.0) -> str | None:
    """Why an attach arm's endpoint is unusable, or None: it must answer
    /v1/models, list the arm's served model, and that model must be the study's
    (by name, or by the path or id it was loaded from)."""
    attach = arm.attach
    url = attach.base_url + "/v1/models"
    try:
        response = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as err:
        return f"attached endpoint {attach.base_url} does not answer: {type(err).__name__}: {err}"
    if response.status_code != 200:
        return f"attached endpoint {url} answered HTTP {response.status_code}"
    try:
        models = [m for m in response.json().get("data", []) if isinstance(m, dict)]
    except (ValueError, AttributeError):
        return f"attached endpoint {url} did not answer with an OpenAI model list"
    entry = next((m for m in models if m.get("id") == attach.served_model), None)
    if entry is None:
        ids = [m.get("id") for m in models]
        return f"attached endpoint {attach.base_url} serves {ids}, not {attach.served_model!r}"
    # What it was loaded from (vLLM and SGLang report it as `root`) must be the study's
    # model, by id or path or at least by its last path part; without a root, the name.
    root = entry.get("root")
    names = {str(root)} if root else {attach.served_model}
    registered = {study.model.id} if root else {v for v in (study.model.id, study.model.served_name) if v}
    if not _same_model(names, registered):
        return (
            f"attached endpoint {attach.base_url} serves {attach.served_model!r} loaded from"
            f" {root or attach.served_model!r}, but the study registers model {study.model.id!r}"
        )
    return None


__all__ = ["EngineInfo", "EngineProcess", "attach_problem", "descendants", "relevant_log_line",
           "start_engine"]
