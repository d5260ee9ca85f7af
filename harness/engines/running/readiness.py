"""Is a started engine really serving the registered arm? Probes, each a small function
returning a problem (one sentence) or None, the shape harness/doctor/check.py uses:
the readiness path answers, /v1/models lists the registered model, one streamed greedy
warm-up generates every token, and the speculation counter says the drafter drafts
(harness/engines/readout/drafting.py, the one rule the smoke asks too). `wait_ready` polls the
first, runs the rest in order, and turns the first problem into an error that carries
the command and the log's tail.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable

import httpx

from harness import interrupts
from harness.engines.readout.drafting import wait_for_drafting
from harness.engines.readout.metrics import scrape_metrics
from harness.engines.running.engine_log import LOG_TAIL_LINES, engine_error_line
from harness.engines.running.engine_process import EngineProcess
from harness.errors import SpecbenchError
from harness.tls import shared_ssl_context

WARMUP_PROMPT = "Say hello."
# How often a starting engine's port and readiness path are tried: a refused connection
# costs microseconds, and a run starts engines many times (the scripted one is ready
# in under a second, so a 0.5 s poll was a third of its start).
READY_POLL_S = 0.1
# SGLang counts a request's verify calls as it finishes, which can be a moment after its
# last chunk left: a drafter arm's counter gets this long to appear after the warm-up.
SPEC_COUNTER_GRACE_S = 5.0


def start_failure(engine: EngineProcess, reason: str) -> SpecbenchError:
    """A start that failed: the reason with the engine's own last error line, the
    command, and the log's tail."""
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


def wait_ready(
    engine: EngineProcess, timeout_s: float, started: float, version: Callable[[], str | None]
) -> None:
    """Until the readiness path answers 200 (the process alive, within `timeout_s` of
    `started`), then every probe below; raises the first problem."""
    kind = engine.kind
    assert kind is not None
    deadline = started + timeout_s
    phase = "the port to open"
    # The shared TLS context: httpx builds a CA store per client otherwise (~0.1 s a start).
    with httpx.Client(timeout=10, verify=shared_ssl_context()) as client:
        while True:
            interrupts.raise_pending()  # a stop signal an import's cleanup swallowed
            code = engine.exit_code
            if code is not None:
                raise start_failure(engine, f"the engine exited with code {code} while starting")
            if time.time() > deadline:
                raise start_failure(
                    engine, f"not ready after {timeout_s:.0f} s (waiting for {phase})"
                )
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
        for probe in (
            lambda: served_model_problem(engine, client),
            lambda: warm_up_problem(engine, client, remaining),
            lambda: metrics_problem(engine, client),
        ):
            said = probe()
            if said is not None:
                raise start_failure(engine, said)
        said = speculation_counter_problem(engine, client)
        if said is None:
            return
        if engine.arm.drafter is not None:
            # One line: the metric, the engine and its version say what to fix.
            raise SpecbenchError(
                f"arm {engine.arm.name!r}: {engine.info.kind} {version() or '(version unknown)'}"
                f" {said}; its engine was stopped (log: {engine.info.log_path})"
            )
        raise start_failure(engine, said)


def served_model_problem(engine: EngineProcess, client: httpx.Client) -> str | None:
    """/v1/models must list the registered model."""
    try:
        response = client.get(engine.base_url + "/v1/models")
        ids = [m.get("id") for m in response.json().get("data", [])]
    except (httpx.HTTPError, ValueError, AttributeError) as err:
        return f"/v1/models did not answer usefully: {err}"
    if engine.served_model not in ids:
        return f"serves {ids}, not the registered model {engine.served_model!r}"
    return None


def warm_up_problem(engine: EngineProcess, client: httpx.Client, timeout_s: float) -> str | None:
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
                return f"warm-up request failed: HTTP {response.status_code}: {detail}"
            for line in response.iter_lines():
                if line.startswith("data:"):
                    chunks += 1
                    done = done or line.strip() == "data: [DONE]"
    except httpx.HTTPError as err:
        return f"warm-up request failed: {type(err).__name__}: {err}"
    if not done or chunks < 2:
        return f"warm-up stream ended early ({chunks} chunks, [DONE] seen: {done})"
    return None


def metrics_problem(engine: EngineProcess, client: httpx.Client) -> str | None:
    """/metrics must parse in the engine's dialect."""
    result = scrape_metrics(engine.metrics_url, engine.metrics_dialect, client=client)
    return None if result.ok else f"/metrics is unusable: {result.error}"


def speculation_counter_problem(engine: EngineProcess, client: httpx.Client) -> str | None:
    """After the warm-up, a drafter arm must export its speculation counter and an arm
    without a drafter must not (harness/engines/readout/drafting.py): otherwise the engine is not
    running the registered arm, or every cell of hours of them would end with no
    acceptance figure."""
    dialect = engine.metrics_dialect
    drafter = engine.arm.drafter is not None

    def read() -> tuple[float | None, str | None]:
        result = scrape_metrics(engine.metrics_url, dialect, client=client)
        if result.snapshot is None:
            return None, f"/metrics is unusable: {result.error}"
        return result.snapshot.drafts, None

    reading = wait_for_drafting(
        read,
        dialect,
        drafter=drafter,
        over="its warm-up",
        wait_s=SPEC_COUNTER_GRACE_S if drafter else 0.0,
        poll_s=0.25,
    )
    return reading.problem


__all__ = [
    "READY_POLL_S",
    "SPEC_COUNTER_GRACE_S",
    "WARMUP_PROMPT",
    "metrics_problem",
    "served_model_problem",
    "speculation_counter_problem",
    "start_failure",
    "wait_ready",
    "warm_up_problem",
]
