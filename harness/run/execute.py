"""Execute one cell against a running engine: load, 1 Hz scrape, 1 Hz GPU telemetry
(when the host has NVML), the host's CPU time outside the engine and the harness
(recorded with the client's health), engine watchdog.

Every request record, metric sample and GPU sample is appended to the cell's files
(requests.jsonl, metrics.jsonl, gpu.jsonl) the moment it exists. The cell's completion marker is written by the caller only
after this returns normally.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from harness.engines import get_engine_kind
from harness.engines.running.serving import ServingEngine
from harness.measure.driver import run_cell
from harness.measure.host_cpu import HostCpuMeter
from harness.measure.patterns import ClosedLoop, OpenLoop
from harness.measure.requests import scored_output_fields
from harness.measure.scrape import scrape_metrics_loop
from harness.prereg.schema import Arm, Study
from harness.records import GpuSample, MetricSample, RequestRecord
from harness.run.cell_requests import cell_items, cell_request_specs
from harness.run.gpu_telemetry import ArmGpus
from harness.run.store import JsonlWriter, RunStore
from harness.rundir import GPU_SAMPLES, METRICS, REQUESTS, SCORES, Outcome, ScoreRecord
from harness.rundir.cell import Cell


class EngineDied(Exception):
    """The engine process exited while a cell was running."""


def cell_pattern(study: Study, cell: Cell, rate_rps: float | None = None) -> ClosedLoop | OpenLoop:
    if cell.kind == "open":
        ol = study.loads.open_loop
        assert ol is not None and rate_rps is not None
        return OpenLoop(
            rate=rate_rps,
            requests=ol.requests,
            duration_s=ol.duration_s,
            arrival=ol.arrival,
            burstiness=ol.burstiness,
            seed=ol.seed,
            warmup=ol.warmup,
        )
    assert cell.concurrency is not None and cell.requests is not None
    return ClosedLoop(
        concurrency=cell.concurrency,
        requests=cell.requests,
        warmup=cell.warmup,
        max_duration_s=study.loads.closed_loop.max_duration_s if cell.kind == "speed" else None,
        stagger_warmup=study.loads.closed_loop.stagger_warmup,
    )


def sampling_fields(study: Study) -> dict[str, Any]:
    s = study.sampling
    # Always sent: a field left unset falls back to the model's generation_config.
    return {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "seed": s.seed,
        "ignore_eos": s.ignore_eos,
    }


async def _watch(engine: ServingEngine, interval_s: float = 1.0) -> None:
    while engine.alive():
        await asyncio.sleep(interval_s)


async def _execute(
    *,
    engine: ServingEngine,
    arm: Arm,
    study: Study,
    cell: Cell,
    attempt: int,
    pattern: ClosedLoop | OpenLoop,
    requests_out: JsonlWriter,
    metrics_out: JsonlWriter,
    on_record: Callable[[RequestRecord], None] | None,
    on_sample: Callable[[MetricSample], None] | None,
    gpus: ArmGpus | None = None,
    on_gpu_sample: Callable[[GpuSample], None] | None = None,
) -> Outcome:
    kind = get_engine_kind(arm.engine)

    def record(rec: RequestRecord) -> None:
        requests_out.write(rec)
        if on_record is not None:
            on_record(rec)

    def sample(s: MetricSample) -> None:
        metrics_out.write(s)
        if on_sample is not None:
            on_sample(s)

    stop = asyncio.Event()
    # Its own thread: NVML calls block, and must not hold the client's event loop.
    sampler = (
        None
        if gpus is None or on_gpu_sample is None
        else gpus.sampler(
            cell_id=cell.id,
            attempt=attempt,
            interval_s=study.recording.scrape_interval_s,
            on_sample=on_gpu_sample,
        )
    )
    scraper = asyncio.create_task(
        scrape_metrics_loop(
            metrics_url=engine.metrics_url,
            dialect=engine.metrics_dialect,
            interval_s=study.recording.scrape_interval_s,
            cell_id=cell.id,
            attempt=attempt,
            on_sample=sample,
            stop=stop,
        )
    )
    load = asyncio.create_task(
        run_cell(
            base_url=engine.base_url,
            model=engine.served_model,
            requests=cell_request_specs(study, cell),
            pattern=pattern,
            sampling=sampling_fields(study),
            extra_body={
                **kind.request_fields(arm, study),
                **(scored_output_fields(engine.metrics_dialect) if cell.kind == "identity" else {}),
            },
            cell_id=cell.id,
            attempt=attempt,
            on_record=record,
            timeout_s=study.recording.request_timeout_s,
            error_rate_limit=study.recording.error_rate_limit,
            lag_limit_ms=study.recording.lag_limit_p99_ms,
            min_delivered_share=study.recording.min_delivered_share,
            # Only speed cells give per-user speeds; elsewhere bursts are reported.
            burst_limit=study.recording.max_burst_share if cell.kind == "speed" else None,
            judge_timing=cell.kind in ("speed", "open"),  # identity/accuracy: texts, scores
            # One drafter round is one chunk of up to k + 1 tokens: not a burst.
            num_draft_tokens=arm.drafter.num_draft_tokens if arm.drafter else 0,
        )
    )
    watchdog = asyncio.create_task(_watch(engine))
    # Scanned before the load and after it, not between: a scan of /proc takes 8-20 ms
    # of this process's interpreter (measured on 2 cores), which the client's stamping
    # thread would wait on. A process the engine starts and ends mid-cell is then counted
    # as foreign: the share errs high, never low (harness/measure/host_cpu.py).
    host = HostCpuMeter(engine.pgid)
    if sampler is not None:  # with the tasks above, which first run at the wait below
        sampler.start()
    host.start()
    try:
        done, _ = await asyncio.wait({load, watchdog}, return_when=asyncio.FIRST_COMPLETED)
        host_cpu = await asyncio.to_thread(host.finish)
        # After a death the remaining requests fail fast and the cell may "finish"
        # before the watchdog looks: an engine that is gone now died during the cell.
        if load not in done or not engine.alive():
            raise EngineDied(f"the {arm.engine} engine of arm {arm.name!r} exited during {cell.id}")
        outcome = load.result()
        if host_cpu is not None and outcome.health is not None:  # judged with the client's
            outcome.health = outcome.health.model_copy(  # health (harness.derived.usable)
                update=host_cpu.health_fields(study.recording.host_foreign_cpu_limit)
            )
        return outcome
    finally:
        for task in (load, watchdog):
            task.cancel()
        stop.set()
        if sampler is not None:  # joined off the loop, while the scraper takes its last scrape
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.to_thread(sampler.stop)
            sampler.stop(timeout_s=0)  # closed for good before gpu.jsonl is, even if cancelled
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(scraper, timeout=study.recording.scrape_interval_s * 5 + 5)
        scraper.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(load, watchdog, scraper, return_exceptions=True)


def execute_cell(
    *,
    store: RunStore,
    engine: ServingEngine,
    arm: Arm,
    study: Study,
    cell: Cell,
    attempt: int,
    rate_rps: float | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_sample: Callable[[MetricSample], None] | None = None,
    gpus: ArmGpus | None = None,
    on_gpu_sample: Callable[[GpuSample], None] | None = None,
) -> Outcome:
    """Run the cell once; returns what it measured. Raises EngineDied. With `gpus`,
    the GPU samples go to gpu.jsonl and `on_gpu_sample` (from the sampler's thread)."""
    pattern = cell_pattern(study, cell, rate_rps)
    with (
        store.writer(cell.id, REQUESTS) as req_w,
        store.writer(cell.id, METRICS) as met_w,
        _gpu_writer(store, cell, gpus) as gpu_w,
    ):

        def gpu_sample(s: GpuSample) -> None:
            assert gpu_w is not None
            gpu_w.write(s)
            if on_gpu_sample is not None:
                on_gpu_sample(s)

        outcome = asyncio.run(
            _execute(
                engine=engine,
                arm=arm,
                study=study,
                cell=cell,
                attempt=attempt,
                pattern=pattern,
                requests_out=req_w,
                metrics_out=met_w,
                on_record=on_record,
                on_sample=on_sample,
                gpus=gpus,
                on_gpu_sample=gpu_sample if gpu_w is not None else None,
            )
        )
    if cell.kind == "accuracy":
        score_cell(store, study, cell, attempt)
    return outcome


@contextlib.contextmanager
def _gpu_writer(store: RunStore, cell: Cell, gpus: ArmGpus | None) -> Iterator[JsonlWriter | None]:
    """gpu.jsonl only where there is telemetry: a host without NVML writes no such file."""
    if gpus is None:
        yield None
        return
    with store.writer(cell.id, GPU_SAMPLES) as writer:
        yield writer


def score_cell(store: RunStore, study: Study, cell: Cell, attempt: int) -> None:
    """Score the attempt's outputs with the task's scorer into scores.jsonl.

    An item whose request failed is scored wrong, so every cell scores the same items."""
    from harness.workloads import score_items

    task = study.task(cell.task)
    items = {item.id: item for item in cell_items(study, cell)}
    responses: dict[str, str] = {}
    failed: dict[str, str] = {}
    path = store.cell_dir(cell.id) / REQUESTS
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            rec = RequestRecord.model_validate_json(line)
            if rec.attempt != attempt or rec.phase != "measure":
                continue
            if rec.ok:
                responses[rec.item_id] = rec.output_text
            else:
                failed[rec.item_id] = rec.error or "failed"
    scored = score_items(task.kind, items, {i: responses.get(i, "") for i in items})
    out = store.cell_dir(cell.id) / SCORES
    out.unlink(missing_ok=True)
    with JsonlWriter(out) as writer:
        for s in scored:
            row = ScoreRecord(id=s.id, extracted=s.extracted, correct=s.correct, detail=s.detail)
            if s.id in failed or s.id not in responses:
                row = row.model_copy(
                    update={
                        "correct": False,
                        "detail": f"request failed: {failed.get(s.id, 'not sent')}",
                    }
                )
            writer.write(row)
