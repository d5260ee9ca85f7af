"""Run one cell: a load pattern over streaming chat requests, every request recorded.

Errors are recorded per request and counted; they end the cell early only when at
least MIN_ERRORS_TO_ABORT measured requests (never warm-up ones) failed and their
rate passes the registered error-rate limit. Every record reaches `on_record` as soon
as its request ends, aborted ones included, so nothing is lost if the run stops later.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Literal

from harness.derived.bursts import is_burst
from harness.measure.delivered import Span
from harness.measure.health import ClientHealthMonitor
from harness.measure.patterns import ClosedLoop, OpenLoop
from harness.measure.requests import RequestSpec, next_turn_messages, turn_item_id
from harness.measure.stamp_bounds import stamp_bounds
from harness.measure.stream import Received, chat_body, complete_record, receive_chat
from harness.measure.transport import (
    SEND_NOT_BEFORE,
    ConnectionSlots,
    holds_first_write,
    wait_until,
)
from harness.records import RequestRecord
from harness.rundir import Outcome

# A cell is aborted early only on real evidence: this many measured requests failed
# and the rate over the measured requests so far passes the limit. One early refusal
# in a 32-request cell must not end it; the limit is judged again on the whole cell
# (harness.derived.usable) once it finishes.
MIN_ERRORS_TO_ABORT = 3


_heap_frozen = False


def _freeze_long_lived_heap() -> None:
    """Once per process, just after a full collection before the first cell: set the
    heap alive then (modules, the study, the task data) aside from the collector. It
    lives as long as the run, and a full pass over it took ~0.1 s, twice per cell (most
    of a short cell's overhead); later collections scan only what came after."""
    global _heap_frozen
    if not _heap_frozen:
        gc.freeze()
        _heap_frozen = True


class _CellState:
    def __init__(self, error_rate_limit: float | None, on_record, on_progress, total) -> None:
        self.error_rate_limit, self.on_record, self.on_progress = (
            error_rate_limit,
            on_record,
            on_progress,
        )
        self.total = total
        self.done = self.failed = 0  # every record, warm-up included (progress)
        self.measured = self.measured_failed = 0  # what the error-rate limit judges
        self.outcome: Counter[tuple[str, str]] = Counter()  # (phase, status)
        self.errors_by_kind: Counter[str] = Counter()
        self.abort_reason: str | None = None
        self.in_flight: set[asyncio.Task] = set()

    def stopped(self) -> bool:
        return self.abort_reason is not None

    def record(self, rec: RequestRecord) -> None:
        self.done += 1
        phase = rec.phase
        if rec.ok:
            self.outcome[(phase, "ok")] += 1
        else:
            self.failed += 1
            self.outcome[(phase, "error")] += 1
            if phase == "measure":
                self.errors_by_kind[rec.error_kind or "other"] += 1
        if phase == "measure":
            self.measured += 1
            self.measured_failed += not rec.ok
        self.on_record(rec)
        if self.on_progress is not None:
            self.on_progress(self.done, self.total)
        limit = self.error_rate_limit
        failed, measured = self.measured_failed, self.measured
        if (
            limit is not None
            and not self.stopped()
            and failed >= MIN_ERRORS_TO_ABORT
            and failed / measured > limit
        ):
            self.abort_reason = (
                f"error rate {failed}/{measured} measured requests = "
                f"{failed / measured:.1%} passed the limit {limit:.1%}"
            )
            current = asyncio.current_task()
            for task in self.in_flight:
                if task is not current:
                    task.cancel()


async def run_cell(
    *,
    base_url: str,
    model: str,
    requests: list[RequestSpec],
    pattern: ClosedLoop | OpenLoop,
    sampling: dict,
    extra_body: dict,
    cell_id: str,
    attempt: int,
    on_record: Callable[[RequestRecord], None],
    timeout_s: float = 600,
    error_rate_limit: float | None = None,
    lag_limit_ms: float = 5.0,
    min_delivered_share: float = 0.97,
    on_progress: Callable[[int, int | None], None] | None = None,
    burst_limit: float | None = None,
    judge_timing: bool = True,
    num_draft_tokens: int | None = None,
) -> Outcome:
    """burst_limit: the share of measured requests that may arrive in bursts before the
    cell is invalid (None: counted, not judged). num_draft_tokens: the arm's k, so one
    drafter round under one stamp is not a burst (0: no drafter; None: unknown, judged
    as before rounds were known: harness.derived.bursts). judge_timing=False: a cell read for its
    texts or scores, whose client lag is reported but never makes it invalid."""
    if not requests:
        raise ValueError(f"cell {cell_id}: no requests to send")
    url = base_url.rstrip("/") + "/v1/chat/completions"
    # Progress counts requests: a multi-turn item's every turn.
    total = pattern.total
    if total is not None:
        total = sum(1 + len(requests[i % len(requests)].later_turns) for i in range(total))
    state = _CellState(error_rate_limit, on_record, on_progress, total)
    closed = isinstance(pattern, ClosedLoop)
    # Open loop: late sends shift the arrival process (judged). Closed loop: the users'
    # turnaround and the concurrency they delivered are judged instead.
    # A cell of fewer requests than users (a small accuracy cell) can keep only that many
    # in flight: it is judged against what it could deliver.
    users = (
        min(pattern.concurrency, pattern.total or pattern.concurrency)
        if isinstance(pattern, ClosedLoop)
        else None
    )
    health = ClientHealthMonitor(
        lag_limit_ms,
        judge_send_lag=not closed,
        concurrency=users,
        min_delivered_share=min_delivered_share,
        burst_limit=burst_limit,
        judge_timing=judge_timing,
    )
    warmup = pattern.warmup

    latency_from: Literal["sent", "scheduled"] = "sent" if closed else "scheduled"
    # Parsing a finished stream and handing its record on wait for the next turn of the
    # loop, so a closed-loop user sends its next request first: that work is the
    # client's, and would otherwise sit between one request and the next.
    unparsed: deque[tuple[RequestRecord, Received]] = deque()

    def complete_one() -> None:
        if unparsed:
            rec, got = unparsed.popleft()
            complete_record(rec, got)
            if rec.phase == "measure":
                health.chunks_received(stamp_bounds(rec))
                if rec.ok:
                    health.request_received(is_burst(rec, num_draft_tokens))
            state.record(rec)

    async def issue(index: int, scheduled_t: float, user: int | None) -> float | None:
        """One item: a request, or a multi-turn session of them (each later turn sent by
        the same user the moment the answer before it is parsed, that answer in its
        messages). Returns when the last of them ended (None: the cell was aborted)."""
        spec = requests[index % len(requests)]
        max_tokens = (
            pattern.max_tokens_for(index, spec.max_tokens)
            if isinstance(pattern, ClosedLoop)
            else spec.max_tokens
        )
        session = len(spec.later_turns) > 0
        messages = spec.messages
        end_t = await send_one(
            index,
            scheduled_t,
            user,
            spec.item_id,
            messages,
            max_tokens,
            1 if session else None,
            last=not session,
        )
        for n, turn in enumerate(spec.later_turns, start=2):
            rec = sessions.pop(index, None)
            if end_t is None or rec is None or not rec.ok or state.stopped():
                break  # a turn that failed ends its session: there is no answer to carry
            messages = next_turn_messages(messages, rec.output_text, turn)
            end_t = await send_one(
                index,
                time.monotonic(),
                user,
                turn_item_id(spec.item_id, n),
                messages,
                max_tokens,
                n,
                last=n == len(spec.later_turns) + 1,
            )
        sessions.pop(index, None)
        return end_t

    # A session's turn, parsed at once: the next turn needs its answer's text.
    sessions: dict[int, RequestRecord] = {}

    async def send_one(
        index: int,
        scheduled_t: float,
        user: int | None,
        item_id: str,
        messages: list[dict],
        max_tokens: int,
        turn: int | None,
        last: bool,
    ) -> float | None:
        rec = RequestRecord(
            cell_id=cell_id,
            attempt=attempt,
            index=index,
            item_id=item_id,
            phase="warmup" if index < warmup else "measure",
            user=user,
            turn=turn,
            scheduled_t=scheduled_t,
            sent_t=scheduled_t,
            latency_from=latency_from,
        )
        task = asyncio.current_task()
        assert task is not None  # each request is sent from its own task
        state.in_flight.add(task)
        body = chat_body(model, messages, max_tokens, sampling, extra_body)
        try:
            asked = time.monotonic()
            client = await slots.acquire()
            # Waiting for a free slot past the due time is client queueing, not client lag.
            queued = max(0.0, time.monotonic() - max(asked, scheduled_t))
            try:
                if scheduled_t > time.monotonic():  # readied early (open loop): leave on time
                    if timed_sends:
                        SEND_NOT_BEFORE.set(scheduled_t)
                    else:
                        await wait_until(scheduled_t)
                rec.sent_t = max(time.monotonic(), scheduled_t)
                got = await receive_chat(client, url, body, rec, timeout_s)
            finally:
                slots.release(client)
            if rec.phase == "measure":
                health.request_sent(rec.sent_t - rec.scheduled_t - queued)
            assert rec.end_t is not None  # receive_chat sets it, whatever happened
            health.request_done(Span(rec.sent_t, rec.end_t, user, rec.phase == "measure"))
        except asyncio.CancelledError:
            rec.end_t = time.monotonic()
            rec.error = f"cell aborted: {state.abort_reason or 'cancelled'}"
            rec.error_kind = "aborted"
            state.in_flight.discard(task)
            state.record(rec)
            if state.abort_reason is None:
                raise
            return None
        state.in_flight.discard(task)
        unparsed.append((rec, got))
        if last:
            asyncio.get_running_loop().call_soon(complete_one)
        else:
            # Everything received before it is handed on first, in order; then this turn.
            while unparsed:
                complete_one()
            sessions[index] = rec
        return rec.end_t

    timed_sends = holds_first_write(base_url)
    slots = ConnectionSlots(base_url, pattern.connections, timeout_s)
    await slots.connect()
    # The cyclic garbage collector holds the interpreter, and with it the stamping
    # thread, for milliseconds at a time (measured: 3-12 ms pauses at 64 streams, the
    # largest stamp errors). Pause it for the cell: reference counting still frees
    # almost everything at once; the few cycles wait for the collection at the end.
    gc.collect()
    _freeze_long_lived_heap()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    started = time.monotonic()
    health.start()
    try:
        await pattern.drive(issue, state.stopped)
    finally:
        while unparsed:  # every record is handed on, whatever ended the cell
            complete_one()
        client_health = await health.stop()
        if gc_was_enabled:
            gc.enable()
        await slots.aclose()
        gc.collect()
    ended = time.monotonic()
    return Outcome(
        n_ok=state.outcome[("measure", "ok")],
        n_errors=state.outcome[("measure", "error")],
        errors_by_kind=dict(state.errors_by_kind),
        aborted=state.abort_reason is not None,
        reason=state.abort_reason,
        health=client_health,
        started_t=started,
        ended_t=ended,
        n_warmup=state.outcome[("warmup", "ok")] + state.outcome[("warmup", "error")],
        warmup_errors=state.outcome[("warmup", "error")],
        records=state.done,
    )
