"""The load driver against the scripted engine: records, order, errors, queueing, health."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import time
from dataclasses import dataclass, field

import pytest

from harness.derived.itl import tokens_per_chunk
from harness.derived.usable import unusable_reason
from harness.measure import driver
from harness.measure.driver import MIN_ERRORS_TO_ABORT
from harness.measure.patterns import ClosedLoop, OpenLoop
from harness.measure.requests import RequestSpec
from harness.measure.stamp_bounds import stamp_bounds
from harness.records import ClientHealth, RequestRecord
from harness.rundir import Outcome
from harness.testengine.server import serve_in_thread
from harness.testengine.spec import FailureInjection, ScriptedEngineSpec

from .cells import FAST, prompts, run, scripted_text

# Every test here drives a cell on the wall clock against a scripted engine.
pytestmark = pytest.mark.timing


def test_closed_loop_records_every_request_in_registered_order() -> None:
    spec = ScriptedEngineSpec(num_draft_tokens=3, accept_probs=[0.8, 0.7, 0.6], **FAST)
    with serve_in_thread(spec) as eng:
        outcome, records = run(eng.base_url, ClosedLoop(concurrency=3, requests=12, warmup=2))
    assert outcome.n_ok == 12 and outcome.n_errors == 0 and outcome.n_warmup == 2
    assert not outcome.aborted and outcome.records == len(records) == 14
    by_index = sorted(records, key=lambda r: r.index)
    assert [r.index for r in by_index] == list(range(14))
    # Prompts cycle through the task's items in registered order.
    assert [r.item_id for r in by_index] == [f"item-{i % 5}" for i in range(14)]
    assert [r.phase for r in by_index] == ["warmup"] * 2 + ["measure"] * 12
    assert {r.user for r in records} == {0, 1, 2}
    for r in records:
        assert r.ok and r.completion_tokens == 16 and sum(n or 0 for n in r.chunk_tokens) == 16
        assert None not in r.chunk_tokens
        assert r.first_token_t is not None
        assert r.end_t is not None
        assert r.scheduled_t <= r.sent_t <= r.first_token_t <= r.end_t
        assert r.chunk_times == sorted(r.chunk_times) and r.chunk_times[0] == r.first_token_t
        assert r.speculation is not None
        assert r.speculation.engine == "vllm" and r.speculation.rounds >= 1
        assert r.spec is not None
        assert r.spec["num_spec_steps"] == r.speculation.rounds
        assert r.response_id is not None
        assert r.response_id.startswith("chatcmpl-")
        assert r.tpot_s is not None and r.tpot_s > 0
    per_chunk = tokens_per_chunk(records)
    assert per_chunk is not None and 1.0 <= per_chunk <= 4.0
    health = outcome.health
    assert health is not None
    assert health.lag_limit_ms == 5.0 and health.lag_p99_ms >= health.lag_p50_ms >= 0


def test_records_reach_on_record_while_the_cell_runs() -> None:
    handed: list[tuple[float, RequestRecord]] = []  # (when on_record got it, the record)
    with serve_in_thread(ScriptedEngineSpec(**FAST)) as eng:
        _, records = run(
            eng.base_url,
            ClosedLoop(concurrency=1, requests=4),
            on_record=lambda r: handed.append((time.monotonic(), r)),
        )
    # Handed over one by one while the cell ran, not in a batch once it was over: each
    # after its own end and before the next request ended. And, by design (driver.py:
    # parsing waits for the loop's next turn), after the user sent its next request, so
    # the client's work does not sit between one request and the next.
    assert [r.index for _, r in handed] == [r.index for r in records] == [0, 1, 2, 3]
    for (at, rec), (_, nxt) in zip(handed, handed[1:], strict=False):
        assert rec.end_t is not None
        assert nxt.end_t is not None
        assert rec.end_t <= nxt.sent_t <= at <= nxt.end_t, (
            rec.index,
            rec.end_t,
            nxt.sent_t,
            at,
            nxt.end_t,
        )
    last_end = handed[-1][1].end_t
    assert last_end is not None and last_end <= handed[-1][0]


def test_the_heap_alive_at_the_first_cell_is_set_aside_from_the_collector_once(monkeypatch) -> None:
    """The first cell freezes the heap after its full collection (later cells' collections
    then scan only what came after it); no later cell freezes again, and the collector is
    back on after each cell."""
    monkeypatch.setattr(driver, "_heap_frozen", False)
    freezes: list[int] = []
    monkeypatch.setattr(driver.gc, "freeze", lambda: freezes.append(gc.get_count()[0]))
    with serve_in_thread(ScriptedEngineSpec(**FAST)) as eng:
        for _ in range(3):
            outcome, _ = run(eng.base_url, ClosedLoop(concurrency=1, requests=2))
            assert outcome.n_ok == 2 and gc.isenabled()
    assert freezes == [0]  # once, right after a full collection (nothing new since)


@pytest.mark.parametrize(
    ("mode", "kind"),
    [("refuse", "http"), ("stall", "timeout"), ("drop", "dropped"), ("malformed", "malformed")],
)
def test_each_failure_mode_is_a_recorded_error_and_the_cell_finishes(mode, kind) -> None:
    failure = FailureInjection(mode=mode, every_nth=3, after_tokens=5, stall_s=30)
    spec = ScriptedEngineSpec(failures=[failure], **FAST)
    with serve_in_thread(spec) as eng:
        outcome, records = run(eng.base_url, ClosedLoop(concurrency=2, requests=9), timeout_s=1.5)
    assert len(records) == 9 and not outcome.aborted
    failed = [r for r in records if not r.ok]
    assert len(failed) == 3 and outcome.n_errors == 3 and outcome.n_ok == 6
    assert outcome.errors_by_kind == {kind: 3}
    for r in failed:
        assert r.error_kind == kind and r.error and r.end_t is not None
    if mode in ("drop", "stall", "malformed"):  # the tokens before the failure are kept
        assert all(sum(n for n in r.chunk_tokens if n) >= 5 for r in failed)


def test_engine_death_mid_cell_fails_the_rest_quickly_and_finishes() -> None:
    spec = ScriptedEngineSpec(failures=[FailureInjection(mode="die", requests=[4])], **FAST)
    with serve_in_thread(spec) as eng:
        outcome, records = run(eng.base_url, ClosedLoop(concurrency=2, requests=10), timeout_s=5)
    assert len(records) == 10 and not outcome.aborted
    kinds = {r.error_kind for r in records if not r.ok}
    assert kinds <= {"dropped", "connect"} and "connect" in kinds
    assert outcome.n_ok >= 2  # the requests before the death; those in flight drop


def test_error_rate_limit_aborts_the_cell_and_keeps_every_record() -> None:
    spec = ScriptedEngineSpec(failures=[FailureInjection(mode="refuse", every_nth=1)], **FAST)
    with serve_in_thread(spec) as eng:
        outcome, records = run(
            eng.base_url, ClosedLoop(concurrency=2, requests=100), error_rate_limit=0.5
        )
    assert outcome.reason is not None
    assert outcome.aborted and "error rate" in outcome.reason
    assert outcome.records == len(records) and MIN_ERRORS_TO_ABORT <= len(records) < 100
    assert all(not r.ok for r in records)


def _refusing(arrivals: list[int]):
    spec = ScriptedEngineSpec(failures=[FailureInjection(mode="refuse", requests=arrivals)], **FAST)
    return serve_in_thread(spec)


def test_one_early_error_does_not_abort_a_32_request_cell() -> None:
    # One refusal at the second request: 1/2 so far, 1/32 over the cell, against
    # prereg.yaml's registered limit of 2 %.
    with _refusing([2]) as eng:
        outcome, records = run(
            eng.base_url, ClosedLoop(concurrency=1, requests=32), error_rate_limit=0.02
        )
    assert not outcome.aborted and outcome.reason is None
    assert (outcome.n_ok, outcome.n_errors, len(records)) == (31, 1, 32)
    assert unusable_reason(kind="identity", requests=records) is None


def test_warm_up_errors_never_count_toward_the_error_rate() -> None:
    # Every warm-up request refused, every measured one fine.
    with _refusing([1, 2, 3, 4]) as eng:
        outcome, records = run(
            eng.base_url, ClosedLoop(concurrency=1, requests=8, warmup=4), error_rate_limit=0.05
        )
    assert not outcome.aborted
    assert (outcome.warmup_errors, outcome.n_errors, outcome.n_ok) == (4, 0, 8)
    assert unusable_reason(kind="speed", requests=records) is None


def test_the_abort_needs_three_measured_errors() -> None:
    # Two refusals at the start (2/2 so far, 2/32 = 6 % over the cell, limit 5 %) are
    # not evidence enough: the cell runs to its end and is usable.
    with _refusing([1, 2]) as eng:
        outcome, records = run(
            eng.base_url, ClosedLoop(concurrency=1, requests=32), error_rate_limit=0.05
        )
    assert not outcome.aborted and outcome.n_errors == 2 and len(records) == 32
    assert unusable_reason(kind="speed", requests=records) is None
    # Three at the start are: the cell ends at once, judged on the measured requests.
    with _refusing([1, 2, 3]) as eng:
        outcome, records = run(
            eng.base_url, ClosedLoop(concurrency=1, requests=32), error_rate_limit=0.05
        )
    assert outcome.reason is not None
    assert outcome.aborted and "error rate 3/3 measured requests" in outcome.reason
    # The user had sent its next request before the third refusal was counted: that
    # one is cancelled, and recorded as aborted.
    kinds = [r.error_kind for r in sorted(records, key=lambda r: r.index)]
    assert kinds[:3] == ["http"] * 3 and set(kinds[3:]) <= {"aborted"} and len(kinds) <= 4
    reason = unusable_reason(
        kind="speed", requests=records, aborted=True, abort_reason=outcome.reason
    )
    assert reason is not None and reason.startswith("aborted: error rate 3/3")


def test_a_cell_where_nothing_succeeded_is_unusable_without_an_abort() -> None:
    # Two requests, both refused: under the three errors an abort needs, yet unusable.
    with _refusing([1, 2]) as eng:
        outcome, records = run(
            eng.base_url, ClosedLoop(concurrency=1, requests=2), error_rate_limit=0.05
        )
    assert not outcome.aborted and outcome.n_errors == 2
    assert unusable_reason(kind="identity", requests=records) == (
        "none of its 2 measured requests succeeded"
    )


def test_a_cell_whose_tokens_all_arrive_in_one_read_has_no_per_user_speed() -> None:
    # The engine holds each output back and sends it in one write as the request ends:
    # first token and end share a stamp, so no request has a TPOT.
    with serve_in_thread(ScriptedEngineSpec(chunking="per_request", **FAST)) as eng:
        outcome, records = run(eng.base_url, ClosedLoop(concurrency=2, requests=8))
    assert outcome.n_ok == 8 and not outcome.aborted
    assert all(r.completion_tokens == 16 and len(r.chunk_times) == 1 for r in records)
    assert all(r.first_token_t == r.end_t and r.per_user_speed is None for r in records)
    reason = unusable_reason(kind="speed", requests=records)
    assert reason is not None and reason.startswith("no request with a per-user speed")
    assert "of 8 successful, 8 had every token in one read" in reason
    # Identity and accuracy cells are judged on outputs, which these requests have.
    assert unusable_reason(kind="identity", requests=records) is None


def test_open_loop_past_capacity_shows_client_queueing_in_latency() -> None:
    # Each request holds the engine ~40 ms; at most 2 in flight; 100 arrivals per second.
    spec = ScriptedEngineSpec(weight_bytes=2e9, bandwidth_bytes_per_s=1e12, max_batch=2)
    with serve_in_thread(spec) as eng:
        outcome, records = run(
            eng.base_url,
            OpenLoop(rate=100.0, requests=30, seed=3, max_in_flight=2),
            requests=prompts(max_tokens=20),
        )
    assert outcome.n_ok == 30
    records.sort(key=lambda r: r.index)
    delays = [r.queue_delay_s for r in records]
    assert delays[-1] > delays[0]
    assert sum(delays[-10:]) > sum(delays[:10])  # the queue grows over the cell
    for r in records:
        # Latency runs from the scheduled time, so the client queue is inside it.
        assert r.ttft_s is not None
        assert r.first_token_t is not None
        assert r.ttft_s == pytest.approx(r.first_token_t - r.scheduled_t)
        assert r.ttft_s >= r.queue_delay_s >= 0
    scheduled = [r.scheduled_t for r in records]
    assert scheduled == sorted(scheduled)


def hold_interpreter(seconds: float) -> None:
    """Hold the interpreter for `seconds` of wall time, as a long C call or a garbage
    collection would: libc's usleep through ctypes.PyDLL keeps the GIL for the whole
    call, so no other thread of the client runs Python meanwhile, however fast or busy
    the machine is (a loop of short C calls would hand the GIL over between them)."""
    ctypes.PyDLL(None).usleep(int(seconds * 1e6))


@dataclass
class Holds:
    """A record sink that holds the client's interpreter after chosen records, and the
    windows it held: [start, start + hold_s] is held for certain, since the hold
    begins after `start` is read and lasts at least hold_s."""

    hold_s: float
    delay_s: float = 0.0  # wait (the interpreter free) before holding
    only: str | None = None  # hold only after records of items with this prefix
    records: list = field(default_factory=list)
    windows: list[tuple[float, float]] = field(default_factory=list)

    def __call__(self, rec) -> None:
        self.records.append(rec)
        if self.only is not None and not rec.item_id.startswith(self.only):
            return
        if self.delay_s:
            # The wait leaves the event loop running: it reads kernel-stamped streams
            # itself (arrival_stamps.READ_IN_LOOP), so a sleep here would hold their reads too.
            asyncio.get_running_loop().call_later(self.delay_s, self._hold)
        else:
            self._hold()

    def _hold(self) -> None:
        start = time.monotonic()
        hold_interpreter(self.hold_s)
        self.windows.append((start, start + self.hold_s))

    def held(self, t: float) -> bool:
        return any(a <= t <= b for a, b in self.windows)


@dataclass
class HeldCell:
    outcome: Outcome
    records: list[RequestRecord]
    holds: Holds
    # Per chunk, in record order: (client stamp, engine's write began, write returned, bound)
    chunks: list[tuple[float, float, float, float]]

    @property
    def health(self) -> ClientHealth:
        assert self.outcome.health is not None  # every measured cell is judged
        return self.outcome.health

    def errors_ms(self) -> list[float]:
        """Client stamp minus the engine's write time, per chunk."""
        return [(mine - wrote) * 1e3 for mine, _, wrote, _ in self.chunks]


def short_and_long(n_short: int, long_tokens: int) -> list:
    """One long stream (index 1, the second user's) beside short requests (the first
    user's): whenever a short one ends, the long one is certain to be mid-stream."""
    short = [
        RequestSpec(f"short-{i}", [{"role": "user", "content": f"short {i}"}], 2)
        for i in range(n_short)
    ]
    long = RequestSpec("long", [{"role": "user", "content": "long"}], long_tokens)
    return [short[0], long, *short[1:]]


def _held_cell(tmp_path, pattern, step_s: float, holds: Holds, requests=None) -> HeldCell:
    import asyncio

    from harness.measure.driver import run_cell
    from harness.testengine.process import ScriptedEngineProcess

    # The engine in its own process, as a real one: its chunks arrive while the client
    # holds its interpreter, and its truth log says when each one was written.
    spec = ScriptedEngineSpec(weight_bytes=step_s * 1e12, bandwidth_bytes_per_s=1e12)
    with ScriptedEngineProcess(spec, tmp_path / "engine") as eng:
        outcome = asyncio.run(
            run_cell(
                base_url=eng.base_url,
                model="scripted",
                requests=requests or prompts(max_tokens=8),
                pattern=pattern,
                sampling={},
                extra_body={},
                cell_id="c",
                attempt=1,
                on_record=holds,
                lag_limit_ms=5.0,
            )
        )
        _, truth_chunks = eng.truth()
    chunks = []
    for rec in holds.records:
        sent = truth_chunks[rec.response_id]
        assert len(sent) == len(rec.chunk_times)
        for mine, true, bound in zip(rec.chunk_times, sent, stamp_bounds(rec), strict=True):
            chunks.append((mine, true["began"], true["t"], bound))
    return HeldCell(outcome, holds.records, holds, chunks)


# How far a kernel stamp may sit outside the engine's write: the realtime-to-monotonic
# offset is read as the tightest of three bracketed clock pairs (microseconds wide).
CLOCK_TOLERANCE_S = 0.5e-3


def test_kernel_stamps_stay_true_while_the_client_holds_its_interpreter(tmp_path) -> None:
    # 100 ms steps; after each short request the client waits 70 ms, then holds its
    # interpreter for 40 ms: the window [70, 110] ms after a step covers the long
    # stream's next write (at 100 ms), and the client is free again 90 ms before the
    # write after it, so it is never a whole step behind on any stream (a machine that
    # starves it for 90 ms would be: its stamps are then bounded, as the next test shows).
    holds = Holds(hold_s=0.04, delay_s=0.07, only="short")
    cell = _held_cell(
        tmp_path,
        ClosedLoop(concurrency=2, requests=7),
        step_s=0.1,
        holds=holds,
        requests=short_and_long(6, long_tokens=30),
    )
    assert len(cell.records) == 7 and all(r.ok for r in cell.records)
    assert len(holds.windows) == 6
    health = cell.health
    assert health.kernel_stamped_fraction == 1.0
    # The client really was held while chunks arrived...
    assert any(holds.held(wrote) for _, _, wrote, _ in cell.chunks)
    # ...and every chunk's stamp is its arrival: inside the engine's own write.
    for mine, began, wrote, bound in cell.chunks:
        assert began - CLOCK_TOLERANCE_S <= mine <= wrote + CLOCK_TOLERANCE_S, (
            f"stamp {(mine - wrote) * 1e3:.1f} ms after the write (bound {bound * 1e3:.1f} ms); "
            f"client health: {health}"
        )
    assert max(b for *_, b in cell.chunks) == 0.0
    # Nothing about the stamps invalidates the cell. (Its users' turnaround is judged too,
    # and is not this test's business: the holds are the client's own doing.)
    assert health.stamp_bound_p99_ms == 0.0 and health.lag_p99_ms <= health.lag_limit_ms
    assert "stamp" not in (health.reason or ""), health.reason


def test_a_client_a_step_behind_is_bounded_and_marks_the_cell_invalid(tmp_path) -> None:
    # 2 ms steps, a 40 ms hold after every request: the user's next request, sent just
    # before the hold, streams its 8 tokens (prefill + 8 steps, ~18 ms) during it, so its
    # chunks pile up and are read together.
    holds = Holds(hold_s=0.04)
    cell = _held_cell(tmp_path, ClosedLoop(concurrency=4, requests=16), step_s=0.002, holds=holds)
    assert len(cell.records) == 16 and all(r.ok for r in cell.records)
    assert max(cell.errors_ms()) >= 5  # stamps really were late...
    for mine, began, wrote, bound in cell.chunks:  # ...but never by more than their bound
        assert began - CLOCK_TOLERANCE_S <= mine <= wrote + bound + CLOCK_TOLERANCE_S
    health = cell.health
    assert not health.valid and "first-token stamp bound p99" in (health.reason or "")
    assert (health.stamp_bound_p99_ms or 0) >= 5 and (health.first_token_bound_p99_ms or 0) >= 5


def test_a_loop_blocked_across_two_writes_gives_bounded_stamps(tmp_path) -> None:
    # The price of reading in the loop (arrival_stamps.READ_IN_LOOP): a loop blocked with the
    # interpreter free (here a 120 ms sleep after each short request, 50 ms steps) does
    # not read, and the kernel merges a stream's next segment into the unread one and
    # keeps the later stamp. Those chunks are late, by at most their bound, and said.
    @dataclass
    class SleepsInLoop(Holds):
        def _hold(self) -> None:
            time.sleep(self.hold_s)  # the interpreter free, the loop not

    holds = SleepsInLoop(hold_s=0.12, only="short")
    cell = _held_cell(
        tmp_path,
        ClosedLoop(concurrency=2, requests=7),
        step_s=0.05,
        holds=holds,
        requests=short_and_long(6, long_tokens=40),
    )
    assert len(cell.records) == 7 and all(r.ok for r in cell.records)
    assert cell.health.kernel_stamped_fraction == 1.0
    assert max(cell.errors_ms()) >= 40  # a chunk carried its successor's stamp...
    for mine, began, wrote, bound in cell.chunks:  # ...never beyond its bound
        assert began - CLOCK_TOLERANCE_S <= mine <= wrote + bound + CLOCK_TOLERANCE_S
    assert (cell.health.stamp_bound_p99_ms or 0) >= 40
    assert (cell.health.loop_lag_p99_ms or 0) >= 100


def test_thread_stamps_under_a_held_interpreter_mark_the_cell_invalid(
    tmp_path, monkeypatch
) -> None:
    from harness.measure import arrival_stamps

    monkeypatch.setattr(arrival_stamps, "KERNEL_STAMPS", False)
    # 50 ms steps; after each short request a 20 ms wait, then a 110 ms hold: the window
    # [20, 130] ms covers the long stream's writes at 50 and 100 ms.
    holds = Holds(hold_s=0.11, delay_s=0.02, only="short")
    cell = _held_cell(
        tmp_path,
        ClosedLoop(concurrency=2, requests=7),
        step_s=0.05,
        holds=holds,
        requests=short_and_long(6, long_tokens=40),
    )
    assert len(cell.records) == 7 and len(holds.windows) == 6
    health = cell.health
    assert health.kernel_stamped_fraction == 0.0
    # Stamped by the reader thread, which cannot run during a hold, a chunk written
    # inside one carries the rest of it (the write at 50 ms is stamped at 130 ms or later).
    assert max(cell.errors_ms()) >= 50
    # The stamp-lag probe, which waits the same way (each hold delays at least one of its
    # 10 ms ticks by 100 ms or more; six holds are over 2 % of the cell's ticks), marks
    # the cell invalid.
    assert not health.valid and "stamp lag p99" in (health.reason or "")
    assert health.lag_max_ms >= 50


def test_an_open_loop_client_sending_late_marks_the_cell_invalid(tmp_path) -> None:
    # 50 arrivals per second, a 40 ms hold after each request: the client can hand on
    # at most 25 records a second, so its sends fall further behind the schedule.
    holds = Holds(hold_s=0.04)
    cell = _held_cell(tmp_path, OpenLoop(rate=50, requests=40, seed=3), step_s=0.005, holds=holds)
    assert len(cell.records) == 40 and all(r.ok for r in cell.records)
    health = cell.health
    assert (health.send_lag_p99_ms or 0) >= 10
    assert not health.valid and "send lag p99" in (health.reason or "")
    # The late sends are inside the latency, which runs from the schedule.
    assert all(
        r.latency_from == "scheduled"
        and r.ttft_s is not None
        and r.queue_delay_s is not None
        and r.ttft_s >= r.queue_delay_s
        for r in cell.records
    )


def test_an_open_loop_request_is_readied_early_and_leaves_at_its_instant(
    tmp_path, monkeypatch
) -> None:
    """The driver gets each open-loop request READY_AHEAD_S before it is due and builds
    it then (here each build holds the interpreter 10 ms, as a cold client's did); the
    first write is held until the scheduled instant, so no request reaches the engine
    before it is due, and what is recorded as its send is never before it either."""
    import asyncio

    import harness.measure.driver as driver
    from harness.measure.patterns import READY_AHEAD_S
    from harness.testengine.process import ScriptedEngineProcess

    built: dict[str, float] = {}
    real_body = driver.chat_body

    def slow_body(model, messages, *args, **kwargs):
        built[messages[0]["content"]] = time.monotonic()
        hold_interpreter(0.01)
        return real_body(model, messages, *args, **kwargs)

    monkeypatch.setattr(driver, "chat_body", slow_body)
    records: list = []
    spec = ScriptedEngineSpec(weight_bytes=0.005 * 1e12, bandwidth_bytes_per_s=1e12)
    requests = [
        RequestSpec(f"p{i}", [{"role": "user", "content": f"prompt {i}"}], 4) for i in range(30)
    ]
    with ScriptedEngineProcess(spec, tmp_path / "engine") as eng:
        asyncio.run(
            driver.run_cell(
                base_url=eng.base_url,
                model="scripted",
                requests=requests,
                pattern=OpenLoop(rate=20, requests=30, seed=5),
                sampling={},
                extra_body={},
                cell_id="c",
                attempt=1,
                on_record=records.append,
                lag_limit_ms=5.0,
            )
        )
        truth, _ = eng.truth()
    assert len(records) == 30 and all(r.ok for r in records)
    for rec in records:
        arrived = truth[rec.response_id]["arrival_t"]
        assert arrived >= rec.scheduled_t, f"request {rec.index} reached the engine early"
        assert rec.sent_t >= rec.scheduled_t
        # Built before it was due: the ready-ahead is what keeps the build out of the lag.
        assert built[f"prompt {rec.index}"] >= rec.scheduled_t - READY_AHEAD_S - 1e-3
    assert any(built[f"prompt {r.index}"] < r.scheduled_t for r in records)


def test_a_multi_turn_item_is_one_users_session_each_turn_carrying_the_answer_before() -> None:
    """Issue 33 part 2: an item with later turns is sent turn by turn by one user, each
    later turn once the answer before it has arrived, with that answer in its messages
    (checked against the scripted engine, whose text is a function of the messages); every
    turn is a record of its own, counted like any request."""
    first = [{"role": "user", "content": "plan a trip"}]
    specs = [
        RequestSpec("mt-1", first, 8, later_turns=("shorter, please", "in French")),
        RequestSpec("one", [{"role": "user", "content": "hi"}], 8),
    ]
    with serve_in_thread(ScriptedEngineSpec(**FAST)) as eng:
        outcome, records = run(eng.base_url, ClosedLoop(concurrency=2, requests=2), requests=specs)
    assert outcome.n_ok == 4 and outcome.records == 4 and not outcome.aborted
    session = sorted((r for r in records if r.index == 0), key=lambda r: r.turn or 0)
    assert [(r.item_id, r.turn) for r in session] == [
        ("mt-1", 1),
        ("mt-1#turn2", 2),
        ("mt-1#turn3", 3),
    ]
    assert len({r.user for r in session}) == 1
    # Each turn left after the one before had ended, and answers the whole conversation.
    for before, after in zip(session, session[1:], strict=False):
        assert before.end_t is not None
        assert before.end_t <= after.sent_t
    messages = first
    for rec, turn in zip(session, ["shorter, please", "in French", None], strict=True):
        assert rec.output_text == scripted_text(messages, 8), rec.turn
        if turn is not None:
            messages = [
                *messages,
                {"role": "assistant", "content": rec.output_text},
                {"role": "user", "content": turn},
            ]
    (single,) = [r for r in records if r.index == 1]
    assert single.turn is None and single.item_id == "one"
