"""Poll an engine's /metrics on a fixed monotonic grid, and turn the samples into a series.

Scrape k is due at start + k * interval, whatever earlier scrapes cost, so the grid
never drifts. Each scrape is bounded by a timeout shorter than the interval: a slow or
failed scrape becomes a recorded gap (ok=False, with why), never a stall of the grid.
When stopped, one last scrape off the grid (final=True) closes the cell's window.
Metric names live only in harness.engines.readout.metrics (parse_metrics, acceptance_window).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any, Self

import httpx
import pandas as pd

from harness.dialects import Dialect
from harness.engines.readout.metrics import MetricsParseError, acceptance_window, parse_metrics
from harness.measure.transport import shared_ssl_context
from harness.records import MetricSample


async def scrape_metrics_loop(
    *,
    metrics_url: str,
    dialect: Dialect,
    interval_s: float,
    cell_id: str,
    attempt: int,
    on_sample: Callable[[MetricSample], None],
    stop: asyncio.Event,
    timeout_s: float | None = None,
) -> None:
    """Scrape until `stop` is set; every due tick yields one MetricSample, and the stop
    one more (final=True)."""
    if interval_s <= 0:
        raise ValueError("interval_s must be > 0")
    timeout = min(timeout_s or interval_s * 0.8, interval_s * 0.95)
    async with httpx.AsyncClient(
        timeout=timeout, trust_env=False, verify=shared_ssl_context()
    ) as client:
        start = time.monotonic()
        k = 0
        while not stop.is_set():
            due = start + k * interval_s
            wait = due - time.monotonic()
            if wait > 0:
                try:
                    await asyncio.wait_for(stop.wait(), wait)
                    break  # stopped while waiting for the tick
                except TimeoutError:
                    pass
            now = time.monotonic()
            missed = math.floor((now - due) / interval_s)
            for j in range(missed):  # the loop was held up past whole ticks: gaps, not shifts
                skipped = due + j * interval_s
                on_sample(
                    MetricSample(
                        cell_id=cell_id,
                        attempt=attempt,
                        t=skipped,
                        wall_time=time.time() - (now - skipped),
                        ok=False,
                        error="scrape tick missed (client event loop held up)",
                    )
                )
            k += missed
            due = start + k * interval_s
            on_sample(await _scrape_once(client, metrics_url, dialect, due, cell_id, attempt))
            k += 1
        final = await _scrape_once(client, metrics_url, dialect, time.monotonic(), cell_id, attempt)
        on_sample(final.model_copy(update={"final": True}))


async def _scrape_once(
    client: httpx.AsyncClient, url: str, dialect: Dialect, due: float, cell_id: str, attempt: int
) -> MetricSample:
    wall = time.time() - (time.monotonic() - due)
    began = time.monotonic()
    snapshot, error = None, None
    try:
        resp = await client.get(url)
        if resp.status_code != 200:
            error = f"HTTP {resp.status_code}"
        else:
            snapshot = parse_metrics(resp.text, dialect)
    except httpx.TimeoutException:
        error = "scrape timed out"
    except httpx.HTTPError as err:
        error = f"{type(err).__name__}: {err}"
    except MetricsParseError as err:
        error = str(err)
    return MetricSample(
        cell_id=cell_id,
        attempt=attempt,
        t=due,
        wall_time=wall,
        took_s=time.monotonic() - began,
        ok=snapshot is not None,
        error=error,
        snapshot=snapshot,
    )


class MetricsScraper:
    """scrape_metrics_loop as a task started and stopped around a cell; keeps its samples."""

    def __init__(
        self,
        *,
        metrics_url: str,
        dialect: Dialect,
        interval_s: float = 1.0,
        cell_id: str,
        attempt: int = 1,
        on_sample: Callable[[MetricSample], None] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.samples: list[MetricSample] = []
        self._on_sample = on_sample
        self._stop = asyncio.Event()
        self._kwargs: dict[str, Any] = {
            "metrics_url": metrics_url,
            "dialect": dialect,
            "interval_s": interval_s,
            "cell_id": cell_id,
            "attempt": attempt,
            "timeout_s": timeout_s,
        }
        self._task: asyncio.Task | None = None

    def _keep(self, sample: MetricSample) -> None:
        self.samples.append(sample)
        if self._on_sample is not None:
            self._on_sample(sample)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            scrape_metrics_loop(on_sample=self._keep, stop=self._stop, **self._kwargs)
        )

    async def stop(self) -> list[MetricSample]:
        self._stop.set()
        if self._task is not None:
            await self._task
        return self.samples

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()


METRICS_SERIES_COLUMNS = [
    "t",
    "wall_time",
    "dt_s",
    "drafts",
    "accepted",
    "acceptance_length",
    "running",
    "waiting",
    "kv_cache_usage",
]


def per_second_series(samples: list[MetricSample]) -> pd.DataFrame:
    """One row per scrape: acceptance over the window since the previous good scrape,
    gauges at the scrape. A failed scrape is a row of NaN (a gap); the window after a
    gap spans it (dt_s says how long), since acceptance length is a ratio of deltas.
    Per-position rates are columns pos_1..pos_k (share of rounds keeping >= i drafts).
    """
    rows: list[dict] = []
    previous = None
    for s in sorted(samples, key=lambda s: s.t):
        row: dict = {"t": s.t, "wall_time": s.wall_time}
        snap = s.snapshot if s.ok else None
        if snap is not None:
            row.update(
                running=snap.running, waiting=snap.waiting, kv_cache_usage=snap.kv_cache_usage
            )
            if previous is not None:
                row["dt_s"] = s.t - previous[0]
                window = acceptance_window(previous[1], snap)
                if window is not None:
                    row.update(
                        drafts=window.drafts,
                        accepted=window.accepted,
                        acceptance_length=window.acceptance_length,
                    )
                    for i, rate in enumerate(window.per_position_rates or []):
                        row[f"pos_{i + 1}"] = rate
            previous = (s.t, snap)
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in METRICS_SERIES_COLUMNS:
        if column not in frame:
            frame[column] = float("nan")
    extra = sorted((c for c in frame.columns if c.startswith("pos_")), key=lambda c: int(c[4:]))
    return frame[METRICS_SERIES_COLUMNS + extra].astype(float)
