"""The host's regime, measured before the hours: is a plain step memory-bound at the
levels the pass bar reads?

Speculative decoding pays where verifying k + 1 positions costs about one plain step:
where a step reads its weights once whatever the batch (GPU decode at a few users). On
a host where a plain step at two users already costs twice a step at one (a CPU without
native bfloat16 matmuls, a GPU at a batch past its ridge), a round of k + 1 positions
costs several steps, and no drafter can pay, whatever it accepts. That is a fact about
the host, not the drafter, and the verdict page says so beside the verdict.

In the smoke stage, right after a baseline's own checks pass (its engine is up), its
plain step is timed at one and two users and at each of the pass bar's levels
(harness.analysis.regime.regime_levels): a short closed
loop of greedy requests run to `recording.regime.max_tokens` (ignore_eos), a warm-up
per user, and the median gap between consecutive chunks of the rest, per token (one
token a chunk without a drafter: the decode step as the user saw it; the median leaves
out the few steps that also prefilled another user's prompt). step(B) / step(1) above `recording.regime.max_step_ratio`
calls level B compute-bound. One line per baseline goes to `smoke/regime.jsonl` and
the manifest's `regime`.

Under `recording.host_foreign_cpu_limit` a level is timed like a cell: where other
processes or the hypervisor took more of the host's CPU than the limit while it ran,
it is timed again (up to `recording.cell_retries` more times), since a neighbour slows a
step at two users more than one at one user and would make a memory-bound host read
compute-bound. A level still busy after its tries keeps its last timing, marked, and the
line says so.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable

from harness.analysis.regime import BaselineRegime, LevelTiming, judge, regime_levels
from harness.engines import get_engine_kind
from harness.measure.driver import run_cell
from harness.measure.host_cpu import HostCpuMeter
from harness.measure.patterns import ClosedLoop
from harness.measure.requests import RequestSpec
from harness.prereg.schema import Study
from harness.records import RequestRecord
from harness.run.execute import sampling_fields

MEASURED_PER_USER = 2  # measured requests per user at each level, after one warm-up each


def step_gaps(rec: RequestRecord) -> list[float]:
    """Seconds per token between a stream's consecutive chunks. Their median is the
    decode step: a step that also prefilled another user's new prompt (a few in each
    stream at these levels) is an outlier there, where it would inflate a TPOT."""
    times, tokens = rec.chunk_times, rec.chunk_tokens
    return [(b - a) / max(1, n or 1) for a, b, n in zip(times, times[1:], tokens[1:], strict=False)]


def _keeper(
    records: list[RequestRecord], on_record: Callable[[RequestRecord], None] | None
) -> Callable[[RequestRecord], None]:
    def keep(rec: RequestRecord) -> None:
        records.append(rec)
        if on_record is not None:
            on_record(rec)

    return keep


def measure_regime(
    study: Study,
    arm_name: str,
    key: str,
    base_url: str,
    served_model: str,
    prompts: list[RequestSpec],
    on_record: Callable[[RequestRecord], None] | None = None,
    engine_group: int | None = None,
) -> BaselineRegime:
    """Time the baseline's plain step at each level (its engine up at base_url, leading
    process group `engine_group`: its CPU is not foreign; None for an attached engine)."""
    arm = study.arm(arm_name)
    setting = study.recording.regime
    specs = [
        RequestSpec(item_id=p.item_id, messages=p.messages, max_tokens=setting.max_tokens)
        for p in prompts
    ]
    # Every request runs to max_tokens, so a level times whole steps, not early stops.
    sampling = {**sampling_fields(study), "ignore_eos": True}
    limit = study.recording.host_foreign_cpu_limit
    tries = 1 + (study.recording.cell_retries if limit is not None else 0)
    steps: dict[int, LevelTiming] = {}
    for users in regime_levels(study):
        for attempt in range(1, tries + 1):
            records: list[RequestRecord] = []
            keep = _keeper(records, on_record)
            meter = HostCpuMeter(engine_group)
            meter.start()
            asyncio.run(
                run_cell(
                    base_url=base_url,
                    model=served_model,
                    requests=specs,
                    pattern=ClosedLoop(
                        concurrency=users,
                        requests=MEASURED_PER_USER * users,
                        warmup=users,
                        stagger_warmup=users > 1,
                    ),
                    sampling=sampling,
                    extra_body=get_engine_kind(arm.engine).request_fields(arm, study),
                    cell_id=f"smoke/regime/{arm_name}/c{users:03d}",
                    attempt=attempt,
                    on_record=keep,
                    timeout_s=study.recording.request_timeout_s,
                    error_rate_limit=None,
                    lag_limit_ms=study.recording.lag_limit_p99_ms,
                    judge_timing=False,
                )
            )
            host = meter.finish()
            busy_share = None if host is None else host.foreign_share + host.steal_share
            busy = limit is not None and busy_share is not None and busy_share > limit
            if not busy:
                break
        per_request = [step_gaps(r) for r in records if r.phase == "measure" and r.ok]
        gaps = [g for request in per_request for g in request]
        steps[users] = LevelTiming(
            step_ms=statistics.median(gaps) * 1e3 if gaps else None,
            requests=sum(1 for request in per_request if request),
            host_busy_share=busy_share,
            host_busy=busy,
            attempts=attempt,
        )
    return judge(
        arm_name, key, setting.max_tokens, setting.max_step_ratio, steps, host_busy_limit=limit
    )
