"""A lean HTTP/1.1 server (raw asyncio) in front of the scripted engine.

Serves /v1/chat/completions (SSE streaming and plain), /v1/models, /health, /metrics and
/version. Raw asyncio rather than a framework so the server costs little CPU per chunk:
on a 2-core host the client, not the server, must be the thing under test.

    python -m harness.testengine --spec SPEC.json --port P --truth-log FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputError, SpecbenchError
from harness.testengine import __version__ as VERSION
from harness.testengine import chunks
from harness.testengine.engine import ScriptedEngine
from harness.testengine.metrics_text import metrics_text
from harness.testengine.sequence import Sequence, prompt_key
from harness.testengine.spec import ENGINE_SESSION_VARIABLE, ScriptedEngineSpec, load_spec

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _response(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    reason = _REASONS.get(status, "Error")
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def _error(status: int, message: str) -> bytes:
    body = {"error": {"message": message, "type": "BadRequestError", "code": status}}
    return _response(status, json.dumps(body).encode())


class HttpSink:
    """One response on one connection: chunked SSE, or a single JSON body."""

    def __init__(self, transport: asyncio.WriteTransport, stream: bool) -> None:
        self.transport, self.stream = transport, stream

    @property
    def gone(self) -> bool:
        return self.transport.is_closing()

    def start(self) -> None:
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )

    def send(self, data: bytes) -> float:
        if not self.gone:
            self.transport.write(b"%x\r\n%s\r\n" % (len(data), data))
        return time.monotonic()

    def finish(self, body: bytes | None = None) -> float:
        if self.gone:
            return time.monotonic()
        if self.stream:
            framed = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            self.transport.write(framed + b"0\r\n\r\n")
        else:
            self.transport.write(_response(200, body or b"{}"))
        return time.monotonic()

    def abort(self) -> None:
        self.transport.abort()


def _prompt_tokens(messages: list) -> int:
    chars = sum(len(str(m.get("content", ""))) for m in messages if isinstance(m, dict))
    return max(1, math.ceil(chars / 4))


def _logprobs_asked(req: dict) -> tuple[bool, int]:
    """The request's `logprobs` and `top_logprobs`, checked as vLLM checks them (its
    400s too, so a client that asks wrongly fails here as it would there)."""
    logprobs = req.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise ValueError("logprobs must be a boolean")
    top = req.get("top_logprobs")
    if top is None:
        return bool(logprobs), 0
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20:
        raise ValueError("top_logprobs must be an integer from 0 to 20")
    if not logprobs:
        raise ValueError("when using `top_logprobs`, `logprobs` must be set to true")
    return True, top


class ScriptedServer:
    def __init__(
        self,
        spec: ScriptedEngineSpec,
        host: str = "127.0.0.1",
        port: int = 0,
        truth_log: str | Path | None = None,
        exit_on_die: bool = False,
    ) -> None:
        self.spec, self.host, self.port = spec, host, port
        # Held open for the server's life and closed in close().
        self.truth_file = open(truth_log, "a", buffering=1 << 16) if truth_log else None  # noqa: SIM115
        self.exit_on_die = exit_on_die
        self.engine: ScriptedEngine | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.WriteTransport] = set()

    def _started(self) -> ScriptedEngine:
        if self.engine is None:
            raise RuntimeError("the scripted server has not started")
        return self.engine

    async def start(self) -> None:
        self.engine = ScriptedEngine(self.spec, self.truth_file, on_die=self._die)
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.abort()
        if self.engine is not None:
            await self.engine.stop()
        if self.truth_file is not None and not self.truth_file.closed:
            self.truth_file.close()

    def _die(self) -> None:
        """Failure injection: the engine process dies mid-cell."""
        if self.truth_file is not None:
            self.truth_file.flush()
        if self.exit_on_die:
            os._exit(3)
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.abort()
        if self.engine is not None:
            self.engine.running.clear()
            self.engine.waiting.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        transport = writer.transport
        self._conns.add(transport)
        try:
            while not transport.is_closing():
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    break
                arrival_t = time.monotonic()
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) < 2:
                    transport.write(_error(400, "bad request line"))
                    break
                method, path = parts[0], parts[1].split("?")[0]
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                await self._dispatch(method, path, body, transport, arrival_t)
                if headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._conns.discard(transport)
            if not transport.is_closing():
                transport.close()

    async def _dispatch(
        self,
        method: str,
        path: str,
        body: bytes,
        transport: asyncio.WriteTransport,
        arrival_t: float,
    ) -> None:
        spec = self.spec
        if path == "/v1/chat/completions" and method == "POST":
            await self._chat(body, transport, arrival_t)
        elif method != "GET":
            transport.write(_error(405, f"{method} not allowed on {path}"))
        elif path == "/health":
            transport.write(_response(200, b""))
        elif path == "/metrics":
            engine = self._started()
            text = metrics_text(
                engine.counters,
                spec.metrics_dialect,
                spec.served_model,
                spec.num_draft_tokens,
                engine.created_wall,
                spec.omit_series,
            )
            transport.write(_response(200, text, "text/plain; version=0.0.4; charset=utf-8"))
        elif path == "/version":
            transport.write(_response(200, json.dumps({"version": VERSION}).encode()))
        elif path == "/v1/models":
            models = {
                "object": "list",
                "data": [{"id": spec.served_model, "object": "model", "owned_by": "specbench"}],
            }
            transport.write(_response(200, json.dumps(models).encode()))
        else:
            transport.write(_error(404, f"no route {path}"))

    async def _chat(self, body: bytes, transport: asyncio.WriteTransport, arrival_t: float) -> None:
        engine, spec = self._started(), self.spec
        try:
            req = json.loads(body)
            messages = req["messages"]
            if not isinstance(messages, list) or not messages:
                raise ValueError("messages must be a non-empty list")
            max_tokens = int(req.get("max_tokens") or req.get("max_completion_tokens") or 128)
            if max_tokens < 1:
                raise ValueError("max_tokens must be >= 1")
            logprobs, top_logprobs = _logprobs_asked(req)
        except (ValueError, KeyError, TypeError) as err:
            transport.write(_error(400, f"bad request: {err}"))
            return
        number = engine.next_number()
        failure = engine.failure_for(number)
        rid = f"chatcmpl-{number:08d}"
        if failure is not None and failure.mode == "refuse":
            transport.write(_error(failure.status, "refused by failure injection"))
            if self.truth_file is not None:
                self.truth_file.write(
                    json.dumps(
                        {
                            "kind": "request",
                            "rid": rid,
                            "number": number,
                            "arrival_t": arrival_t,
                            "first_t": None,
                            "end_t": time.monotonic(),
                            "completion_tokens": 0,
                            "finish_reason": None,
                            "error": "refuse",
                        }
                    )
                    + "\n"
                )
            return
        stream = bool(req.get("stream", False))
        options = req.get("stream_options") or {}
        include_usage = stream and bool(options.get("include_usage"))
        seq = Sequence(
            rid=rid,
            number=number,
            prompt_tokens=_prompt_tokens(messages),
            max_tokens=max_tokens,
            ignore_eos=bool(req.get("ignore_eos", False)),
            stream=stream,
            include_usage=include_usage,
            continuous_usage=include_usage
            and spec.continuous_usage
            and bool(options.get("continuous_usage_stats")),
            sink=HttpSink(transport, stream),
            arrival_t=arrival_t,
            failure=failure,
            prompt_key=prompt_key(messages),
            spec_details=bool(req.get("return_spec_tokens_details", False)),
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            token_ids=spec.metrics_dialect == "vllm"
            and bool(req.get("return_tokens_as_token_ids")),
        )
        if stream:
            seq.sink.start()
            use = chunks.usage(seq.prompt_tokens, 0) if seq.continuous_usage else None
            seq.sink.send(
                chunks.sse(
                    chunks.stream_chunk(
                        rid, spec.served_model, {"role": "assistant", "content": ""}, None, use
                    )
                )
            )
        await engine.submit(seq)


@dataclass
class RunningEngine:
    """A scripted engine serving in a background thread (for tests)."""

    server: ScriptedServer
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def metrics_url(self) -> str:
        return self.base_url + "/metrics"

    def stop(self) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.server.close(), self.loop)
        fut.result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@contextmanager
def serve_in_thread(spec: ScriptedEngineSpec, truth_log: str | Path | None = None):
    """Run the scripted engine on 127.0.0.1 (a free port) in its own thread and loop."""
    loop = asyncio.new_event_loop()
    server = ScriptedServer(spec, port=0, truth_log=truth_log)
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        ready.set()
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=run, name="scripted-engine", daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("scripted engine did not start")
    running = RunningEngine(server, loop, thread)
    try:
        yield running
    finally:
        running.stop()


def _spec_from_args(args: argparse.Namespace) -> ScriptedEngineSpec:
    if args.spec_json is not None:
        try:
            spec = ScriptedEngineSpec.model_validate_json(args.spec_json)
        except ValueError as err:
            raise InputError(f"--spec-json: not a valid scripted engine spec: {err}") from err
    elif args.spec is not None:
        spec = load_spec(args.spec)
    else:
        raise InputError("give --spec FILE or --spec-json TEXT")
    if args.served_model_name:
        spec = spec.model_copy(update={"served_model": args.served_model_name})
    if args.session is not None:
        spec = spec.for_session(args.session)
    return spec


def _declared_faults(spec: ScriptedEngineSpec, session: int | None = None) -> list[str]:
    faults = []
    if spec.session_speed_spread and session is not None:
        faults.append(
            f"session {session}: speed factor {spec.speed_factor:.4f}"
            f" (session_speed_spread {spec.session_speed_spread:g},"
            f" seed {spec.session_speed_seed})"
        )
    if spec.frozen_spec_counters and spec.num_draft_tokens:
        faults.append("speculation counters frozen (frozen_spec_counters): they never move")
    if spec.output_salt:
        faults.append(
            f"output salted (output_salt {spec.output_salt}): greedy text differs"
            " from an unsalted engine's"
        )
    if spec.flip_at_token is not None:
        faults.append(
            f"output flipped (flip_at_token {spec.flip_at_token}): that word is the"
            " runner-up, not the target's top-1"
        )
    return faults


async def _serve(args: argparse.Namespace) -> None:
    server = ScriptedServer(
        _spec_from_args(args), args.host, args.port, args.truth_log, exit_on_die=True
    )
    await server.start()
    print(f"scripted engine listening on http://{args.host}:{server.port}", flush=True)
    for fault in _declared_faults(server.spec, args.session):
        # As a real engine logs its configuration: the log says what this one will do.
        print(f"WARNING scripted engine: {fault}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.close()


def _session_from_environment() -> int | None:
    value = os.environ.get(ENGINE_SESSION_VARIABLE)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise InputError(
            f"${ENGINE_SESSION_VARIABLE}={value!r}: expected a session number"
        ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.testengine", description="Scripted OpenAI-compatible test engine."
    )
    parser.add_argument("--spec", help="ScriptedEngineSpec file, JSON or YAML")
    parser.add_argument("--spec-json", help="ScriptedEngineSpec as inline JSON")
    parser.add_argument("--served-model-name", help="override the spec's served_model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--truth-log", default=None, help="JSONL: every chunk's send time")
    parser.add_argument(
        "--session",
        type=int,
        default=None,
        help=f"engine session number for session_speed_spread (default:"
        f" ${ENGINE_SESSION_VARIABLE}, else none)",
    )
    args = parser.parse_args(argv)
    try:
        if args.session is None:
            args.session = _session_from_environment()
        asyncio.run(_serve(args))
    except SpecbenchError as err:
        for line in err.lines:
            print(f"specbench: {line}", file=sys.stderr)
        return err.exit_code
    return 0
