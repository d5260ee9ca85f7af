"""How cells are measured and judged valid: recording, sessions, the regime check."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from harness.prereg.schema.base import Positive, PositiveInt, Strict


class RegimeCheck(Strict):
    """The host's regime, timed in the smoke stage (harness/run/regime.py): each baseline's
    plain step at one and two users and at the pass bar's levels. A level whose step is more than
    max_step_ratio x the one-user step is compute-bound there, and the verdict page says
    speculation cannot pay on this host, beside whatever verdict the bars give."""

    enabled: bool = Field(True, description="Time the regime in the smoke stage.")
    # A memory-bound step reads its weights once whatever the batch: flat within noise.
    max_step_ratio: Annotated[float, Field(gt=1)] = Field(
        1.3,
        description="A level whose plain step is more than this many times the one-user"
        " step is compute-bound there.",
    )
    max_tokens: PositiveInt = Field(
        32, description="Output tokens per timed request, run to the end (ignore_eos)."
    )


class Recording(Strict):
    """How cells are measured, and the limits that make a cell invalid (never loosened to
    reach a verdict)."""

    scrape_interval_s: Positive = Field(
        1.0, description="Seconds between scrapes of the engine's /metrics during a cell."
    )
    lag_limit_p99_ms: Positive = Field(
        5.0,
        description="A cell is invalid when the client's stamp lag, stamp bound, or"
        " (open loop) send lag passes this at p99, in ms"
        " (harness/measure/health.py); so is a closed-loop cell whose"
        " users' turnaround p99 passes it.",
    )
    min_delivered_share: Annotated[float, Field(gt=0, le=1)] = Field(
        0.97,
        description="A closed-loop cell is invalid when the requests it kept in flight"
        " (time-averaged over the measured window) fall below this share"
        " of its registered users (harness/measure/delivered.py).",
    )
    max_burst_share: Annotated[float, Field(ge=0, le=1)] = Field(
        0.10,
        description="A closed-loop speed cell is invalid when more than this share of"
        " its measured requests arrived in bursts: most tokens from several"
        " steps under one stamp (one drafter round of up to k + 1 tokens is"
        " one step: harness/derived/bursts.py).",
    )
    # One engine holds a GPU; a CPU study may keep its arms' engines up between stages to
    # save restarts.
    engines_alive: Annotated[int, Field(ge=1)] = Field(
        1,
        description="Engines kept up at once, each arm's reused until the least recently"
        " used must go; pre-flight refuses more than 1 on a GPU engine kind.",
    )
    error_rate_limit: Annotated[float, Field(ge=0, le=1)] | None = Field(
        0.05,
        description="A cell is aborted, and unusable, once at least 3 of its measured"
        " requests failed and they are more than this share of those finished"
        " so far. null: never aborted.",
    )
    request_timeout_s: Positive = Field(
        600.0, description="Seconds a request may take in all before it is recorded as failed."
    )
    cell_retries: Annotated[int, Field(ge=0)] = Field(
        2,
        description="Extra attempts at an unusable cell (its engine died, or it measured"
        " nothing usable: harness/derived/usable.py), every attempt kept; a"
        " resume counts the attempts already made.",
    )
    gpu_throttle: Literal["flag", "remeasure"] = Field(
        "flag",
        description="A cell during which the GPU throttled for power, heat or a"
        " hardware slowdown (NVML, sampled with the metrics:"
        " harness/derived/throttle.py) is flagged in the cell table, the"
        " bar evidence and the report; `remeasure` also measures a timed"
        " (speed, open-loop) cell again within cell_retries.",
    )
    host_foreign_cpu_limit: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None,
        description="Every cell records the share of the host's CPU time that went to"
        " other processes (neither the engine's nor the harness's) and to"
        " the hypervisor (steal) (harness/measure/host_cpu.py); a timed"
        " cell whose foreign + steal share passes this is unusable and"
        " measured again within cell_retries. null: recorded, never"
        " judged.",
    )
    # An engine that outranks the client for the CPU starves it (issue 34).
    client_priority: Literal["match_engine", "as_started"] = Field(
        "match_engine",
        description="`match_engine`: the client raises its session's"
        " autogroup and its threads to the engine's priority"
        " where the kernel allows, never above it, and puts them"
        " back at the end (harness/measure/priority.py)."
        " `as_started`: left as they are, with a warning.",
    )
    accuracy_concurrency: PositiveInt = Field(
        16, description="Users in an accuracy cell (a closed loop over the task's items)."
    )
    per_request_spec_metrics: bool = Field(
        True,
        description="Ask the engine for each request's speculation figures (vLLM"
        " --per-request-spec-decode-metrics summary, SGLang"
        " return_spec_tokens_details), kept in each request record.",
    )
    # A broken arm stops the run in minutes, not hours in.
    smoke: bool = Field(
        True,
        description="Before the first registered cell every arm starts, answers two"
        " prompts greedily, moves its speculation counter (drafter arms)"
        " and matches its baseline's text (harness/run/smoke.py); false"
        " skips it.",
    )
    # The lab saw session-to-session variation as large as the effects. The defaults are
    # the registered study's design (issue 46): one session's interval covered 0.25 at the
    # lab's session variation, and `specbench validate` says so of a study that registers
    # fewer (harness/prereg/operating.py, design_warnings).
    sessions: PositiveInt = Field(
        3,
        description="Repeated paired sessions: each repeating cell is measured in this"
        " many engine sessions, a fresh engine start each, in interleaved arm"
        " order (baseline, drafter, drafter, baseline, ...), and its interval"
        " is taken over the sessions (bars.intervals).",
    )
    sessions_for: Literal["pass_cells", "speed_cells"] = Field(
        "speed_cells",
        description="Which cells repeat: the speed cells at the pass bar's"
        " concurrencies (`pass_cells`), or every closed-loop speed"
        " cell (`speed_cells`).",
    )
    regime: RegimeCheck = Field(
        default_factory=RegimeCheck, description="The host's regime check in the smoke stage."
    )
