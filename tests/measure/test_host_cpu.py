"""The host's foreign CPU share on hand-written /proc files, and how a cell is judged on it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.derived.usable import unusable_reason
from harness.measure.host_cpu import (
    HostCpuMeter,
    HostCpuSampler,
    parse_host_ticks,
    parse_process_ticks,
)
from harness.records import ClientHealth, RequestRecord

HARNESS, ENGINE = 100, 500


class FakeProc:
    """A /proc folder: the aggregate and per-CPU lines of stat, and one stat per process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(exist_ok=True)
        self.ticks = dict(user=0, nice=0, system=0, idle=0, iowait=0, irq=0, softirq=0, steal=0)

    def host(self, **add: int) -> None:
        """Advance the host's counters by `add` ticks each."""
        for name, n in add.items():
            self.ticks[name] += n
        line = " ".join(str(v) for v in self.ticks.values())
        # guest and guest_nice (already inside user and nice) must not be added again.
        (self.root / "stat").write_text(
            f"cpu  {line} 999 999\ncpu0 {line}\ncpu1 {line}\nintr 1 2 3\n"
        )

    def process(
        self,
        pid: int,
        cpu: int,
        *,
        ppid: int = 1,
        pgid: int | None = None,
        sid: int | None = None,
        start: int = 10,
        comm: str = "python3",
    ) -> None:
        pgid, sid = pgid or pid, sid or pgid or pid
        utime, stime = cpu - cpu // 3, cpu // 3
        # cutime/cstime (fields 16, 17: reaped children, whose time was counted while
        # they lived) move with the process's own here: they must not count.
        fields = (
            f"S {ppid} {pgid} {sid} 0 -1 4194304 0 0 0 0 {utime} {stime} {7000 + cpu}"
            f" 7000 20 0 1 0 {start} 1000 10 0"
        )
        folder = self.root / str(pid)
        folder.mkdir(exist_ok=True)
        (folder / "stat").write_text(f"{pid} ({comm}) {fields}\n")

    def gone(self, pid: int) -> None:
        (self.root / str(pid) / "stat").unlink()
        (self.root / str(pid)).rmdir()


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    fake = FakeProc(tmp_path / "proc")
    fake.host(user=1000, idle=5000)
    # Alive at the start: the harness and a child of it, the engine (its own session)
    # and a worker in its group, a grandchild that left the group, and another program.
    fake.process(HARNESS, 50, ppid=1, pgid=90, sid=90)
    fake.process(101, 5, ppid=HARNESS, pgid=90, sid=90)
    fake.process(ENGINE, 300, ppid=HARNESS, pgid=ENGINE)
    fake.process(501, 700, ppid=ENGINE, pgid=ENGINE)
    fake.process(502, 20, ppid=501, pgid=502, sid=502)  # setsid'd: a descendant still
    fake.process(505, 10, ppid=1, pgid=505, sid=ENGINE)  # orphaned: in the session still
    fake.process(900, 4000, ppid=1, pgid=900)
    return fake


def meter(proc: FakeProc, engine: int | None = ENGINE) -> HostCpuMeter:
    return HostCpuMeter(engine, harness_pid=HARNESS, proc=proc.root)


def test_foreign_is_the_busy_time_neither_the_engines_tree_nor_the_harnesss_and_steal_apart(proc):
    m = meter(proc)
    m.start()
    # 2 CPUs x 1 s at 100 ticks/s = 200 ticks: 150 busy (110 own, 40 other), 10 steal,
    # 30 idle, 10 iowait.
    proc.process(HARNESS, 50 + 20, ppid=1, pgid=90, sid=90)
    proc.process(101, 5 + 10, ppid=HARNESS, pgid=90, sid=90)
    proc.process(ENGINE, 300 + 30, ppid=HARNESS, pgid=ENGINE)
    proc.process(501, 700 + 40, ppid=ENGINE, pgid=ENGINE)
    proc.process(502, 20 + 5, ppid=501, pgid=502, sid=502)
    proc.process(505, 10 + 5, ppid=1, pgid=505, sid=ENGINE)
    proc.process(900, 4000 + 40, ppid=1, pgid=900)
    proc.host(user=120, system=30, steal=10, idle=30, iowait=10)
    got = m.finish()
    assert got is not None and got.engine_counted
    assert got.foreign_share == pytest.approx(40 / 200)
    assert got.steal_share == pytest.approx(10 / 200)


def test_an_attached_engine_is_not_own_so_its_cpu_counts_as_foreign(proc):
    m = meter(proc, engine=None)
    m.start()
    proc.process(HARNESS, 50 + 20, ppid=1, pgid=90, sid=90)
    # Not the harness's child, as an attached engine is not.
    proc.process(ENGINE, 300 + 60, ppid=1, pgid=ENGINE)
    proc.host(user=80, idle=120)
    got = m.finish()
    assert got is not None and not got.engine_counted
    assert got.foreign_share == pytest.approx(60 / 200)


def test_a_process_born_mid_cell_counts_from_zero_and_one_that_exits_keeps_what_was_seen(proc):
    m = meter(proc)
    m.start()
    # The engine starts a worker, seen first at a periodic scan with 15 ticks already:
    # all of them are the cell's.
    proc.process(503, 15, ppid=ENGINE, pgid=ENGINE, start=400)
    proc.process(501, 700 + 5, ppid=ENGINE, pgid=ENGINE)
    m.sample()
    # Then worker 501 uses 10 more and exits before the end: those 10 are lost to
    # "own", so they read as foreign (the share errs high). 503 reaches 25.
    proc.gone(501)
    proc.process(503, 25, ppid=ENGINE, pgid=ENGINE, start=400)
    proc.host(user=25 + 15, idle=160)  # 503's 25, 501's 15: nothing else ran
    got = m.finish()
    assert got is not None
    assert got.foreign_share == pytest.approx(10 / 200)


def test_a_reused_pid_is_another_process(proc):
    m = meter(proc)
    m.start()
    # Worker 501 exits; a new process of the engine gets pid 501 with 8 ticks so far.
    proc.gone(501)
    proc.process(501, 8, ppid=ENGINE, pgid=ENGINE, start=900)
    proc.host(user=8, idle=192)
    got = m.finish()
    assert got is not None and got.foreign_share == pytest.approx(0.0)  # not 8 - 700


def test_the_sampler_thread_sees_a_process_that_lives_between_start_and_end(proc):
    sampler = HostCpuSampler(meter(proc), interval_s=0.01)
    sampler.start()
    proc.process(504, 30, ppid=ENGINE, pgid=ENGINE, start=500)
    deadline = time.monotonic() + 5
    while not any(key[0] == 504 for key in sampler.meter._seen) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.gone(504)
    proc.host(user=30, idle=170)
    got = sampler.stop()
    assert got is not None and got.foreign_share == pytest.approx(0.0)
    assert sampler.stop() is got  # a second stop only returns


def test_nothing_is_recorded_without_proc_stat(tmp_path):
    m = HostCpuMeter(None, proc=tmp_path)
    m.start()
    assert m.finish() is None


def test_the_parsers_read_guest_once_and_a_command_with_spaces_and_parentheses():
    ticks = parse_host_ticks("cpu  10 1 5 80 2 1 1 3 7 0\ncpu0 10 1 5 80 2 1 1 3 7 0\n")
    assert (ticks.total, ticks.idle, ticks.steal, ticks.busy) == (103, 82, 3, 18)
    p = parse_process_ticks("42 (a (b) c) R 7 8 9 0 -1 0 0 0 0 0 11 12 13 14 20 0 1 0 77 0 0")
    assert (p.pid, p.ppid, p.pgid, p.sid, p.cpu, p.start) == (42, 7, 8, 9, 23, 77)


# --- judging a cell ---------------------------------------------------------------------


def health(
    foreign: float | None,
    steal: float | None = 0.0,
    limit: float | None = 0.25,
    engine_counted: bool = True,
) -> ClientHealth:
    return ClientHealth(
        lag_p50_ms=0,
        lag_p99_ms=0,
        lag_max_ms=0,
        cpu_percent=1,
        lag_limit_ms=5,
        valid=True,
        host_foreign_cpu_share=foreign,
        host_steal_share=steal,
        host_foreign_cpu_limit=limit,
        host_engine_counted=engine_counted,
    )


def judged(kind: str, h: ClientHealth) -> str | None:
    ok = RequestRecord(
        cell_id="c",
        attempt=1,
        index=0,
        item_id="i",
        phase="measure",
        scheduled_t=0.0,
        sent_t=0.0,
        first_token_t=0.1,
        end_t=1.0,
        completion_tokens=10,
    )
    assert ok.ok and ok.per_user_speed  # usable but for the host
    return unusable_reason(kind=kind, requests=[ok], health=h)


def test_a_timed_cell_over_the_limit_is_unusable_with_the_shares_in_one_line():
    reason = judged("speed", health(0.40, 0.02))
    assert reason == (
        "host busy: 0.42 of the host's CPU time went to other processes (0.40)"
        " and the hypervisor (0.02 steal), above the limit 0.25"
    )
    assert judged("open", health(0.40)) is not None


def test_steal_counts_against_the_limit_with_the_foreign_share():
    assert judged("speed", health(0.20, 0.10)) is not None
    assert judged("speed", health(0.20, 0.04)) is None


def test_below_the_limit_without_one_or_unmeasured_a_cell_is_usable():
    assert judged("speed", health(0.24)) is None
    assert judged("speed", health(0.90, limit=None)) is None
    assert judged("speed", health(None, None)) is None


def test_texts_and_scores_are_not_judged_on_the_host():
    assert judged("identity", health(0.90)) is None
    assert judged("accuracy", health(0.90)) is None


def test_an_attached_engine_is_named_in_the_reason():
    reason = judged("speed", health(0.5, engine_counted=False))
    assert reason is not None and reason.endswith(
        "the engine is attached, so its own CPU, if on this host, counts as other"
    )
