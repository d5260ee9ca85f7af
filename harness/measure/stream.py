"""One streaming chat completion, timed on the monotonic clock, turned into a RequestRecord.

While the stream runs the client only stamps and keeps the raw SSE events; parsing
waits until the stream has ended (receive_chat collects, complete_record parses), so
the per-chunk work that could delay the next chunk's stamp never runs between chunks.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import httpx

from harness.derived.tokens import tiled_prefix
from harness.engines.readout.request_spec import request_speculation
from harness.measure.transport import arrival_time, request_left_time
from harness.records import RequestRecord, TokenLogprob, kept_bytes


class StreamError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def chat_body(
    model: str, messages: list[dict], max_tokens: int, sampling: dict, extra_body: dict
) -> dict:
    """The request body: sampling always explicit (engines otherwise fall back to the
    model's generation_config), usage on every chunk where the engine supports it."""
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    body.update({k: v for k, v in sampling.items() if v is not None})
    body.update(extra_body)
    return body


@dataclass
class Received:
    """A response as it came off the wire: stamped SSE events, and the failure if any."""

    events: list[tuple[float, bytes]] = field(default_factory=list)
    failure: tuple[str, str] | None = None  # (kind, message)


async def receive_chat(
    client: httpx.AsyncClient, url: str, body: dict, rec: RequestRecord, timeout_s: float
) -> Received:
    """Send the request and collect its stamped events; sets rec.sent_t and rec.end_t.
    Nothing is parsed here, so the caller can send its next request first."""
    got = Received()
    events = got.events
    last_t: float | None = None
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, json=body) as resp:
                # sent_t is when the request actually left, not when we meant to send it:
                # the client's own delay before the write counts as its queueing.
                rec.sent_t = request_left_time(resp) or rec.sent_t
                if resp.status_code != 200:
                    detail = (await resp.aread())[:300].decode("utf-8", "replace")
                    raise StreamError("http", f"HTTP {resp.status_code}: {detail}")
                pending = b""
                async for raw in resp.aiter_raw():
                    last_t = arrival_time(resp)
                    pending += raw
                    if b"\r" in pending:
                        pending = pending.replace(b"\r\n", b"\n")
                    while (cut := pending.find(b"\n\n")) >= 0:
                        events.append((last_t, pending[:cut]))
                        pending = pending[cut + 2 :]
                if pending.strip() and last_t is not None:  # last_t: set by any read
                    events.append((last_t, pending))
        rec.end_t = last_t if last_t is not None else time.monotonic()
    except StreamError as err:
        got.failure = (err.kind, str(err))
    except TimeoutError:
        got.failure = ("timeout", f"no complete response within {timeout_s:g} s")
    except httpx.TimeoutException as err:
        got.failure = ("timeout", f"{type(err).__name__}: {err}")
    except httpx.ConnectError as err:
        got.failure = ("connect", f"cannot connect: {err}")
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as err:
        got.failure = ("dropped", f"stream dropped: {type(err).__name__}: {err}")
    except httpx.HTTPError as err:
        got.failure = ("http", f"{type(err).__name__}: {err}")
    if got.failure is not None and rec.end_t is None:
        rec.end_t = time.monotonic()
    return got


def complete_record(rec: RequestRecord, got: Received) -> None:
    """Parse what was received into `rec`: chunks, usage, text, and the error if any."""
    if got.failure is None:
        try:
            _fill_from_events(rec, got.events)
            return
        except StreamError as err:
            _fail(rec, got.events, err.kind, str(err))
            return
    _fail(rec, got.events, *got.failure)


def token_logprobs(content: list) -> list[TokenLogprob]:
    """The OpenAI chat `logprobs.content` entries (vLLM's and SGLang's shape): each
    token's text, logprob and its top alternatives, best first, with the bytes a text
    cannot carry (records.TokenLogprob)."""
    out = []
    for entry in content:
        if not isinstance(entry, dict) or "token" not in entry:
            raise StreamError("malformed", f"malformed logprobs entry: {str(entry)[:120]}")
        top = []
        for a in entry.get("top_logprobs") or []:
            text, raw = str(a.get("token", "")), kept_bytes(str(a.get("token", "")), a.get("bytes"))
            logprob = float(a.get("logprob", -9999.0))
            top.append((text, logprob) if raw is None else (text, logprob, raw))
        text = str(entry["token"])
        out.append(
            TokenLogprob(
                token=text,
                logprob=float(entry.get("logprob", -9999.0)),
                top=sorted(top, key=lambda a: -a[1]),
                bytes=kept_bytes(text, entry.get("bytes")),
            )
        )
    return out


LOST = TokenLogprob(token="", logprob=0.0, lost=True)


def place_lost(
    scored: list[TokenLogprob], chunk: list[TokenLogprob], tokens: int | None, placed: bool
) -> bool:
    """Append a chunk's entries, led by a placeholder for each token its usage counted
    that no entry was sent for (SGLang 0.5.23 sends no chunk for a step whose text is
    empty, entrypoints/openai/serving_chat.py `if delta:`, and its tokens' logprobs are
    lost). Returns whether every token so far is placed (False once a chunk's count is
    unknown: the missing ones, if any, are then added at the end, unplaced)."""
    if tokens is None:
        scored.extend(chunk)
        return False
    scored.extend([LOST] * max(0, tokens - len(chunk)) + chunk)
    return placed


def _fail(rec: RequestRecord, events: list[tuple[float, bytes]], kind: str, message: str) -> None:
    if rec.end_t is None:
        rec.end_t = time.monotonic()
    try:
        _fill_from_events(rec, events, require_done=False)
    except StreamError:
        pass
    rec.error, rec.error_kind = message, kind


def _fill_from_events(
    rec: RequestRecord, events: list[tuple[float, bytes]], require_done: bool = True
) -> None:
    seen_done = False
    previous_total = 0
    rec.chunk_times, rec.chunk_tokens, rec.first_token_t = [], [], None
    text: list[str] = []
    scored: list[TokenLogprob] | None = None
    placed = True  # every output token's entry, or its placeholder, is in place
    malformed: str | None = None
    for t, event in events:
        data = b"\n".join(
            line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")
        )
        if not data:
            continue
        if data == b"[DONE]":
            seen_done = True
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            malformed = malformed or f"malformed chunk: {data[:120]!r}"
            continue
        if "error" in obj and "choices" not in obj:
            raise StreamError("engine", f"engine error in stream: {str(obj['error'])[:200]}")
        if rec.response_id is None:
            rec.response_id = obj.get("id")
        choices = obj.get("choices") or []
        content = "".join((c.get("delta") or {}).get("content") or "" for c in choices)
        text.append(content)
        chunk: list[TokenLogprob] | None = None
        for c in choices:
            if c.get("finish_reason"):
                rec.finish_reason = c["finish_reason"]
            logprobs = c.get("logprobs")
            if isinstance(logprobs, dict) and logprobs.get("content") is not None:
                chunk = (chunk or []) + token_logprobs(logprobs["content"])
        usage = obj.get("usage")
        tokens: int | None
        if usage and usage.get("completion_tokens") is not None:
            rec.completion_tokens = int(usage["completion_tokens"])
            rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
            tokens = rec.completion_tokens - previous_total if choices else 0
            previous_total = rec.completion_tokens
        else:
            tokens = None if content else 0
        if tokens != 0:  # a chunk that carried output (count unknown when None)
            if rec.first_token_t is None:
                rec.first_token_t = t
            rec.chunk_times.append(t)
            rec.chunk_tokens.append(tokens)
        if chunk is not None or (scored is not None and tokens):
            scored = scored if scored is not None else []
            placed = place_lost(scored, chunk or [], tokens, placed)
        found = request_speculation(obj)
        if found is not None:
            rec.spec, rec.speculation = found
    rec.output_text = "".join(text)
    if (
        scored is not None
        and rec.completion_tokens is not None
        and (len(scored) < rec.completion_tokens)
    ):
        # Tokens counted and never scored. With every chunk counted they are the last ones;
        # otherwise only the entries whose bytes tile the text from its start are placed
        # for sure, and everything after them is lost.
        keep = len(scored) if placed else tiled_prefix(scored, rec.output_text)
        scored = scored[:keep] + [LOST] * (rec.completion_tokens - keep)
    rec.token_logprobs = scored
    if malformed:
        raise StreamError("malformed", malformed)
    if require_done and not seen_done:
        raise StreamError("dropped", "stream ended before [DONE]")
