"""How cells are measured and judged valid: recording, sessions, the regime check."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from harness.prereg.schema.base import Positive, PositiveInt, Strict


class RegimeCheck(Strict):
    """The host's regime, timed in the smoke stage (harness/run/regime.py): each baseline's
    plain step at one user and at the pass bar's levels. A level whose step is more than
    max_step_ratio x the one-user step is compute-bound there, and the verdict page says
    speculation cannot pay on this host, beside whatever verdict the bars give."""

    enabled: bool = True
    # A memory-bound step reads its weights once whatever the batch: flat within noise.
    max_step_ratio: Annotated[float, Field(gt=1)] = 1.3
    max_tokens: PositiveInt = 32  # per timed request, run to the end (ignore_eos)


class Recording(Strict):
    scrape_interval_s: Positive = 1.0
    # A cell is invalid when the client's stamp lag, stamp bound, or (open loop) send
    # lag passes this at p99 (harness/measure/health.py).
    lag_limit_p99_ms: Positive = 5.0
    # A closed-loop cell is also invalid when its users' turnaround p99 passes the lag
    # limit, or the requests it kept in flight (time-averaged over the measured window)
    # fall below this share of its registered users (harness/measure/delivered.py).
    min_delivered_share: Annotated[float, Field(gt=0, le=1)] = 0.97
    # A closed-loop speed cell is invalid when more than this share of its measured
    # requests arrived in bursts: most tokens from several steps under one stamp (one
    # drafter round of up to k + 1 tokens is one step: harness/derived/bursts.py).
    max_burst_share: Annotated[float, Field(ge=0, le=1)] = 0.10
    # Engines kept up at once, each arm's reused until the least recently used must go.
    # 1 on a GPU (one engine holds the GPU); a CPU study may keep its arms' engines up
    # between stages to save restarts (pre-flight refuses more than 1 on a GPU kind).
    engines_alive: Annotated[int, Field(ge=1)] = 1
    error_rate_limit: Annotated[float, Field(ge=0, le=1)] | None = 0.05
    request_timeout_s: Positive = 600.0
    # Extra attempts at a cell whose engine died or that measured nothing usable
    # (harness/derived/usable.py); a resume counts the attempts already made.
    cell_retries: Annotated[int, Field(ge=0)] = 2
    # A cell during which the GPU throttled for power, heat or a hardware slowdown
    # (NVML, sampled with the metrics: harness/derived/throttle.py) is flagged in the
    # cell table, the bar evidence and the report; `remeasure` also measures a timed
    # (speed, open-loop) cell again within cell_retries, like any unusable cell.
    gpu_throttle: Literal["flag", "remeasure"] = "flag"
    # Every cell records the share of the host's CPU time that went to other processes
    # (neither the engine's nor the harness's) and to the hypervisor (steal)
    # (harness/measure/host_cpu.py). A timed cell whose foreign + steal share passes this
    # is unusable and measured again within cell_retries: another program disturbed it.
    # None: recorded, never judged.
    host_foreign_cpu_limit: Annotated[float, Field(gt=0, le=1)] | None = None
    # An engine that outranks the client for the CPU starves it (issue 34): with
    # match_engine the client raises its session's autogroup and its threads to the
    # engine's priority where the kernel allows, never above it, and puts them back at
    # the end (harness/measure/priority.py); as_started leaves them, and warns.
    client_priority: Literal["match_engine", "as_started"] = "match_engine"
    accuracy_concurrency: PositiveInt = 16
    per_request_spec_metrics: bool = True
    # Before the first registered cell every arm starts, answers two prompts greedily,
    # moves its speculation counter (drafter arms) and matches its baseline's text
    # (harness/run/smoke.py): a broken arm stops the run in minutes, not hours in.
    # Off only when a study says so.
    smoke: bool = True
    # Repeated paired sessions (harness/plan.py): each repeating cell is measured in this
    # many engine sessions, a fresh engine start each, in interleaved arm order (baseline,
    # drafter, drafter, baseline, ...); intervals are then taken over the sessions
    # (bars.intervals.method, harness/analysis/intervals.py). The lab saw session-to-session
    # variation as large as the effects. Which cells repeat: the speed cells at the pass
    # bar's concurrencies (pass_cells), or every closed-loop speed cell (speed_cells).
    # The defaults are the registered study's design (issue 46): one session's interval
    # covered 0.25 at the lab's session variation, and `specbench validate` says so of a
    # study that registers fewer (harness/prereg/operating.py, design_warnings).
    sessions: PositiveInt = 3
    sessions_for: Literal["pass_cells", "speed_cells"] = "speed_cells"
    regime: RegimeCheck = Field(default_factory=RegimeCheck)
