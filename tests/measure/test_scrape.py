"""The scraper: a drift-free grid, gaps for failed scrapes, per-second acceptance."""

from __future__ import annotations

import asyncio
import math

import pytest

from harness.derived.itl import tokens_per_chunk
from harness.measure.driver import run_cell
from harness.measure.patterns import ClosedLoop
from harness.measure.scrape import MetricsScraper, per_second_series, scrape_metrics_loop
from harness.records import EngineSnapshot, MetricSample, RequestRecord
from harness.testengine.server import serve_in_thread
from harness.testengine.spec import ScriptedEngineSpec

from .cells import prompts

# Every test here runs a scraper on the wall clock.
pytestmark = pytest.mark.timing


async def scrape_for(url: str, seconds: float, interval: float) -> list[MetricSample]:
    samples: list[MetricSample] = []
    stop = asyncio.Event()
    task = asyncio.create_task(
        scrape_metrics_loop(
            metrics_url=url,
            dialect="vllm",
            interval_s=interval,
            cell_id="c",
            attempt=1,
            on_sample=samples.append,
            stop=stop,
        )
    )
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.wait_for(task, 5)
    return samples


def assert_on_grid(samples: list[MetricSample], interval: float) -> None:
    # The last sample is the one taken at the stop, off the grid; the rest are on it.
    assert samples[-1].final and not any(s.final for s in samples[:-1])
    assert samples[-1].t > samples[-2].t
    samples = samples[:-1]
    t0 = samples[0].t
    for s in samples:
        k = (s.t - t0) / interval
        assert k == pytest.approx(round(k), abs=1e-6)  # due times never drift
    ks = [round((s.t - t0) / interval) for s in samples]
    assert ks == list(range(len(ks)))  # no tick lost: a missed one is a recorded gap


def test_scrapes_on_the_grid_against_the_scripted_engine() -> None:
    spec = ScriptedEngineSpec(
        weight_bytes=1e9, bandwidth_bytes_per_s=1e12, num_draft_tokens=2, accept_probs=[0.8, 0.5]
    )
    # Ticks 0.5 s apart give each scrape 0.4 s to answer: ample for a local engine even
    # on a machine with every core busy, so a timed-out scrape here is a real fault.
    with serve_in_thread(spec) as eng:
        samples = asyncio.run(scrape_for(eng.metrics_url, 2.1, 0.5))
    assert len(samples) >= 5 and all(s.ok for s in samples), [s.error for s in samples]
    assert_on_grid(samples, 0.5)
    assert samples[0].snapshot is not None
    assert samples[0].snapshot.engine == "vllm" and samples[0].snapshot.drafts == 0


async def _slow_metrics_server(delay: float) -> asyncio.base_events.Server:
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(delay)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_slow_and_failed_scrapes_are_gaps_not_stalls() -> None:
    async def main():
        server = await _slow_metrics_server(delay=1.0)
        port = server.sockets[0].getsockname()[1]
        slow = await scrape_for(f"http://127.0.0.1:{port}/metrics", 1.0, 0.2)
        server.close()
        dead = await scrape_for(f"http://127.0.0.1:{port}/metrics", 0.5, 0.1)
        return slow, dead

    slow, dead = asyncio.run(main())
    for samples, interval in ((slow, 0.2), (dead, 0.1)):
        assert samples and all(not s.ok and s.error and s.snapshot is None for s in samples)
        assert_on_grid(samples, interval)
    assert "timed out" in slow[0].error
    assert len(slow) >= 4  # one per tick although each scrape hangs for 5 ticks
    frame = per_second_series(slow)
    assert len(frame) == len(slow) and frame["acceptance_length"].isna().all()


def snap(drafts: float, accepted: float, per_pos: list[float], running: float) -> EngineSnapshot:
    return EngineSnapshot(
        engine="vllm",
        drafts=drafts,
        draft_tokens=drafts * 2,
        accepted_tokens=accepted,
        accepted_per_position=per_pos,
        running=running,
        waiting=0,
        kv_cache_usage=0.1,
    )


def sample(t: float, snapshot: EngineSnapshot | None) -> MetricSample:
    return MetricSample(
        cell_id="c",
        t=t,
        wall_time=1e9 + t,
        ok=snapshot is not None,
        error=None if snapshot else "HTTP 500",
        snapshot=snapshot,
    )


def test_per_second_series_from_counter_deltas_with_a_gap() -> None:
    frame = per_second_series(
        [
            sample(0.0, snap(0, 0, [0, 0], 0)),
            sample(1.0, snap(10, 15, [9, 6], 4)),
            sample(2.0, None),
            sample(3.0, snap(30, 35, [25, 10], 2)),
        ]
    )
    assert list(frame["t"]) == [0.0, 1.0, 2.0, 3.0]
    assert math.isnan(frame["acceptance_length"][0])
    assert frame["acceptance_length"][1] == pytest.approx(2.5)  # 1 + 15/10
    assert frame["pos_1"][1] == pytest.approx(0.9) and frame["pos_2"][1] == pytest.approx(0.6)
    assert frame.iloc[2][["acceptance_length", "running"]].isna().all()  # the gap
    # After the gap the window spans it, and says so.
    assert frame["dt_s"][3] == pytest.approx(2.0)
    assert frame["acceptance_length"][3] == pytest.approx(1 + 20 / 20)
    assert frame["running"][3] == 2


def test_engine_acceptance_length_agrees_with_client_tokens_per_chunk() -> None:
    """The cross-check on the scripted engine: the two sides must agree exactly here,
    since every verification step is one chunk and counters are honest."""
    spec = ScriptedEngineSpec(
        weight_bytes=1e9,
        bandwidth_bytes_per_s=1e12,
        num_draft_tokens=3,
        accept_probs=[0.9, 0.7, 0.5],
    )

    async def main(eng):
        records: list[RequestRecord] = []
        # The first scrape (at once, 0.8 s to answer) comes before any request; the
        # one at the stop after the last.
        async with MetricsScraper(
            metrics_url=eng.metrics_url, dialect="vllm", interval_s=1.0, cell_id="c"
        ) as scraper:
            await asyncio.sleep(0.3)
            await run_cell(
                base_url=eng.base_url,
                model="scripted",
                requests=prompts(max_tokens=48),
                pattern=ClosedLoop(concurrency=4, requests=16),
                sampling={"temperature": 0.0},
                extra_body={},
                cell_id="c",
                attempt=1,
                on_record=records.append,
            )
            await asyncio.sleep(0.3)
        return records, scraper.samples

    with serve_in_thread(spec) as eng:
        records, samples = asyncio.run(main(eng))
    from harness.engines.readout.metrics import acceptance_window

    first, last = samples[0], samples[-1]
    assert first.ok and last.ok and last.final, [s.error for s in samples]
    window = acceptance_window(first.snapshot, last.snapshot)
    assert window is not None
    client = tokens_per_chunk(records)
    assert window.acceptance_length == pytest.approx(client, rel=1e-9)
    series = per_second_series(samples)
    busy = series[series["drafts"] > 0]
    assert not busy.empty and busy["acceptance_length"].between(1.0, 4.0).all()


def test_the_final_scrape_closes_the_window_at_the_end_of_the_cell() -> None:
    """A cell shorter than one interval: without the scrape at the stop there would be
    one sample and no window; with it, the engine's counters cover the whole cell."""
    spec = ScriptedEngineSpec(
        weight_bytes=1e9, bandwidth_bytes_per_s=1e12, num_draft_tokens=2, accept_probs=[0.8, 0.5]
    )

    async def main(eng):
        records: list[RequestRecord] = []
        # A grid too coarse for a second tick within the cell, however slow the machine.
        async with MetricsScraper(
            metrics_url=eng.metrics_url, dialect="vllm", interval_s=600.0, cell_id="c"
        ) as scraper:
            await asyncio.sleep(0.05)  # the first scrape, at the start of the grid
            await run_cell(
                base_url=eng.base_url,
                model="scripted",
                requests=prompts(max_tokens=16),
                pattern=ClosedLoop(concurrency=2, requests=6),
                sampling={"temperature": 0.0},
                extra_body={},
                cell_id="c",
                attempt=1,
                on_record=records.append,
            )
        return records, scraper.samples

    with serve_in_thread(spec) as eng:
        records, samples = asyncio.run(main(eng))
    assert [s.final for s in samples] == [False, True] and all(s.ok for s in samples)
    first, last = samples[0].snapshot, samples[1].snapshot
    generated = last.generation_tokens - first.generation_tokens
    assert generated == sum(r.completion_tokens for r in records) == 6 * 16
