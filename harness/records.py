"""The records a run writes, one JSON object per line, and reads back for analysis.

These are the contract between the measurement stages (load driver, scraper,
runner) and everything downstream (analysis, bars, report). Times are seconds on
the client's monotonic clock unless a name says `wall`.
"""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from harness.dialects import Dialect
from harness.errors import InputError

Phase = Literal["warmup", "measure"]


class RecordModel(BaseModel):
    # Records are written by us but read back from disk: ignore nothing silently.
    model_config = ConfigDict(extra="forbid")


class RequestSpeculation(RecordModel):
    """One request's speculation as the engine itself reported it in the response, in
    specbench's names (harness.engines.readout.request_spec reads each engine's own fields).

    vLLM (`--per-request-spec-decode-metrics`, `metrics.speculative_decoding`):
    rounds = num_spec_steps, draft_tokens = num_draft_tokens, accepted =
    num_accepted_draft_tokens, histogram = acceptance_histogram. SGLang
    (`return_spec_tokens_details`, `sglext.spec_tokens_details`): rounds =
    spec_verify_ct, draft_tokens = spec_num_proposed_drafts, accepted =
    spec_num_correct_drafts, histogram = spec_correct_drafts_histogram.
    histogram[j] is the number of rounds that kept exactly j drafts.
    """

    engine: Dialect
    rounds: int = Field(ge=0)
    draft_tokens: int = Field(ge=0)
    accepted: int = Field(ge=0)
    histogram: list[int] = Field(default_factory=list)


class TokenLogprob(RecordModel):
    """One output token as the engine scored it (identity cells ask for these): its text,
    its logprob, and the target's top alternatives at that position, best first.

    Tokens are compared by `key`, never by text: a fragment of a multi-byte character
    prints as U+FFFD (SGLang) or "" (vLLM) whatever its bytes. vLLM is asked for token ids
    (`return_tokens_as_token_ids`: the text is `token_id:N`); SGLang sends each token's
    true bytes, kept in `bytes` (and as a third element of a `top` entry) where they
    differ from the text's. `lost`: a token the engine counted (usage) but never sent an
    entry for (SGLang 0.5.23 drops a streamed step whose text is empty), a placeholder."""

    token: str
    logprob: float
    top: list[tuple[str, float] | tuple[str, float, list[int]]] = Field(default_factory=list)
    bytes: list[int] | None = None
    lost: bool = False

    @property
    def key(self) -> builtins.bytes:  # the builtin: `bytes` is a field here
        """What the token is, exactly: its bytes (or vLLM's `token_id:N`)."""
        return token_key(self.token, self.bytes)

    @property
    def shown(self) -> str:
        """The text to show: a fragment's bytes escaped (\\xe4), never a bare U+FFFD."""
        return self.key.decode("utf-8", "backslashreplace") if self.bytes else self.token

    @property
    def margin(self) -> float | None:
        """logprob(top-1) - logprob(top-2): how clearly the target preferred its first
        choice here (None: fewer than two alternatives were sent)."""
        if len(self.top) < 2:
            return None
        return self.top[0][1] - self.top[1][1]


def token_key(text: str, raw: list[int] | None) -> bytes:
    return bytes(raw) if raw is not None else text.encode()


def kept_bytes(text: str, raw: object) -> list[int] | None:
    """An engine's `bytes` for a token, kept only where its text does not carry them."""
    if not isinstance(raw, list) or not all(isinstance(b, int) and 0 <= b < 256 for b in raw):
        return None
    return None if bytes(raw) == text.encode() else list(raw)


class RequestRecord(RecordModel):
    """One request as the client saw it."""

    cell_id: str
    attempt: int = 1
    index: int  # order of issue within the cell, warm-up included
    item_id: str
    phase: Phase = "measure"
    user: int | None = None  # closed loop: which user sent it
    # A multi-turn session's turn (1-based; None: a single-turn item). A later turn's
    # item_id is `<item>#turn<n>` (harness.measure.requests.turn_item_id).
    turn: int | None = None
    scheduled_t: float  # when the load pattern wanted it sent (closed loop: its user's
    # previous request ended)
    sent_t: float  # when the HTTP request actually left
    # Where TTFT and latency run from. Open loop: the schedule, so a request that waited
    # in the client (for a slot, or a busy client) carries that wait. Closed loop: the
    # send, since a user's next request has no schedule to fall behind; the client's
    # turnaround before it is reported as send lag, and is not the engine's time.
    latency_from: Literal["scheduled", "sent"] = "scheduled"
    first_token_t: float | None = None  # first chunk carrying >= 1 output token
    end_t: float | None = None  # stream finished (or failed)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # One entry per chunk that carried output tokens: its arrival time and how
    # many tokens it added (from cumulative usage when the engine sends it).
    chunk_times: list[float] = Field(default_factory=list)
    chunk_tokens: list[int | None] = Field(default_factory=list)
    finish_reason: str | None = None
    output_text: str = ""
    # Per output token, when the request asked for logprobs (identity cells; never speed).
    token_logprobs: list[TokenLogprob] | None = None
    spec: dict | None = None  # the engine's per-request speculation figures, as sent
    speculation: RequestSpeculation | None = None  # the same, parsed (None: none sent)
    response_id: str | None = None  # the engine's id for the response (matches its logs)
    error: str | None = None
    error_kind: str | None = None  # http, timeout, dropped, malformed, connect

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def queue_delay_s(self) -> float:
        """Time between when the request was due and when it left the client."""
        return self.sent_t - self.scheduled_t

    @property
    def start_t(self) -> float:
        return self.sent_t if self.latency_from == "sent" else self.scheduled_t

    @property
    def ttft_s(self) -> float | None:
        """From the start (see latency_from): open-loop client queueing is never hidden."""
        if self.first_token_t is None:
            return None
        return self.first_token_t - self.start_t

    @property
    def latency_s(self) -> float | None:
        if self.end_t is None:
            return None
        return self.end_t - self.start_t

    @property
    def tpot_s(self) -> float | None:
        """(end - first token) / (completion_tokens - 1)."""
        if (
            self.end_t is None
            or self.first_token_t is None
            or self.completion_tokens is None
            or self.completion_tokens < 2
        ):
            return None
        return (self.end_t - self.first_token_t) / (self.completion_tokens - 1)

    @property
    def per_user_speed(self) -> float | None:
        """1 / TPOT, for a successful request whose tokens arrived over time. None when
        every token came in one read (first token and end share a stamp) or < 2 tokens."""
        tpot = self.tpot_s
        if not self.ok or tpot is None or tpot <= 0:
            return None
        return 1.0 / tpot


class EngineSnapshot(RecordModel):
    """One scrape of an engine's /metrics, mapped to specbench's names.

    Counters are cumulative since engine start (None when the series is absent);
    gauges are instantaneous.
    """

    engine: Dialect
    drafts: float | None = None  # vLLM num_drafts; SGLang spec_verify_calls
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: list[float] | None = None
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    preemptions: float | None = None
    requests_finished: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1
    engine_accept_length: float | None = None  # SGLang's windowed gauge, as reported


class MetricSample(RecordModel):
    """One line of metrics.jsonl: a scrape attempt, successful or not."""

    cell_id: str
    attempt: int = 1
    t: float  # monotonic time the scrape was due
    wall_time: float  # time.time() at the same moment, for the report's axes
    took_s: float | None = None
    ok: bool
    error: str | None = None  # a gap in the series: why
    snapshot: EngineSnapshot | None = None
    # The scrape taken as the cell ended, off the grid, so the engine's counters cover
    # the whole cell rather than stopping at the last whole interval.
    final: bool = False


class ClientHealth(RecordModel):
    """How healthy the load generator was during a cell."""

    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    cpu_percent: float  # client process CPU, 100 = one core
    lag_limit_ms: float
    valid: bool
    reason: str | None = None
    # The lag_* figures are the delay of the client's chunk stamps (what distorts a
    # measurement); this is the event loop's own lag (sends, parsing), for context.
    loop_lag_p99_ms: float | None = None
    # How late requests left against their schedule, less any wait for a free slot
    # (closed loop: the client's turnaround from one request's end to the next send).
    send_lag_p99_ms: float | None = None
    # Over received output chunks, how late a stamp could be because the chunk shared
    # its read with a later one (measure.stamp_bounds); 0 when the client kept up.
    stamp_bound_p99_ms: float | None = None
    # The same over each measured request's first output chunk: what TTFT and per-user
    # speed read besides the end (exact), and what the lag limit judges.
    first_token_bound_p99_ms: float | None = None
    # Share of received segments stamped by the kernel (the rest: by the reader thread).
    kernel_stamped_fraction: float | None = None
    # Closed loop: the load delivered (measure.delivered). Requests in flight,
    # time-averaged from the first measured send until the first user ran out of
    # requests, against the registered users; and each user's turnaround from a
    # request's end to its next send.
    registered_concurrency: int | None = None
    delivered_concurrency: float | None = None
    delivered_share: float | None = None  # delivered / registered
    min_delivered_share: float | None = None  # the registered floor it was judged against
    turnaround_p50_ms: float | None = None
    turnaround_p99_ms: float | None = None
    turnaround_max_ms: float | None = None
    # Share of measured requests most of whose tokens shared one arrival stamp
    # (harness.derived.bursts), and the registered share above which the cell is invalid
    # (None: not judged, as for cells that give no per-user speed).
    burst_share: float | None = None
    burst_limit: float | None = None
    # False for cells whose figures are texts or scores (identity, accuracy): their
    # timings are reported but do not make them invalid.
    timing_judged: bool = True
    # The host over the cell (measure.host_cpu): the share of every CPU's time that went
    # to processes neither the engine's nor the harness's, and to the hypervisor (steal);
    # a timed cell whose sum passes the registered limit is unusable (harness.derived.usable;
    # None: recorded, not judged). host_engine_counted False: an attached engine, only
    # the harness counted as own. All None where /proc/stat cannot be read.
    host_foreign_cpu_share: float | None = None
    host_steal_share: float | None = None
    host_foreign_cpu_limit: float | None = None
    host_engine_counted: bool | None = None


class GpuReading(RecordModel):
    """One GPU at one tick, as NVML reported it (harness.measure.gpu).

    A figure NVML does not support on this GPU is None. A reading that failed (the GPU
    fell off the bus, NVML errored) has ok=False and says why: a gap, never a crash.
    """

    index: int  # NVML's index (PCI bus order)
    uuid: str | None = None
    ok: bool = True
    error: str | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None  # the enforced limit
    temperature_c: float | None = None
    gpu_util_pct: float | None = None
    mem_util_pct: float | None = None
    memory_used_mib: float | None = None
    # The clock-event (throttle) reasons bitmask, and the name of every bit set in it,
    # idle and clock settings included; which of them count as throttling is
    # harness.derived.throttle's business.
    clock_event_bits: int | None = None
    clock_events: list[str] = Field(default_factory=list)


class GpuSample(RecordModel):
    """One line of gpu.jsonl: one tick of the GPU sampler, over the arm's GPUs."""

    cell_id: str
    attempt: int = 1
    t: float  # monotonic time the tick was due (the client's clock, as for metrics)
    wall_time: float
    took_s: float | None = None  # how long this tick's NVML calls took
    ok: bool
    error: str | None = None  # a gap: why (a missed tick; a reading's own error is in gpus)
    gpus: list[GpuReading] = Field(default_factory=list)
    final: bool = False  # taken as the cell ended, off the grid


# --- the smoke stage (harness/run/smoke.py): smoke/arms.jsonl ---------------------------


SmokeOutcome = Literal["passed", "failed"]


class SmokeAnswer(RecordModel):
    """One smoke prompt as an arm answered it (its full record is in smoke/requests.jsonl)."""

    item_id: str
    ok: bool
    error: str | None = None
    output_text: str = ""
    token_logprobs: list[TokenLogprob] | None = None  # None: the engine sent none
    finish_reason: str | None = None
    completion_tokens: int | None = None


class SmokeDivergence(RecordModel):
    """Where a drafter's smoke answer first left its baseline's, token by token."""

    item_id: str
    token_index: int | None  # None: a side sent no logprobs
    drafter_token: str | None = None
    baseline_token: str | None = None
    drafter_margin: float | None = None  # the target's logprob(top-1) - logprob(top-2)
    baseline_margin: float | None = None
    kind: Literal["numeric", "real", "unknown"]
    why: str = ""


class SmokeCounter(RecordModel):
    """A drafter arm's speculation counter around its smoke prompts."""

    name: str  # the engine's series: vllm:spec_decode_num_drafts_total, sglang:spec_verify_calls_total
    before: float | None  # None: absent (SGLang creates it on the first finished request)
    after: float | None
    moved: bool


class SmokeAcceptance(RecordModel):
    """A drafter's tokens per round over its smoke prompts against its registered floor."""

    tokens_per_round: float | None  # the client's: tokens after the first chunk / chunks
    floor: float  # drafter.expect.acceptance_length_min
    below: bool
    allowed: bool = False  # below, and run anyway under --allow-deviation


class SmokeArmCheck(RecordModel):
    """One arm's own smoke check: it started, answered, and (drafters) drafted."""

    kind: Literal["arm"] = "arm"
    arm: str
    # sha256 over what the check depends on (the arm, its baseline, the model, sampling,
    # the prompts): a resume does not redo a passed check whose key is unchanged.
    key: str
    attempt: int  # this arm's smoke checks so far in this run folder, 1-based
    started_wall: float
    ended_wall: float
    engine: Literal["started", "reused", "attached", "not started"]
    status: SmokeOutcome
    failed_check: Literal["start", "answer", "counter", "draft_count", "acceptance"] | None = None
    reason: str | None = None  # one line naming the arm
    log_line: str | None = None  # the engine log's last relevant line
    log_path: str | None = None
    answers: list[SmokeAnswer] = Field(default_factory=list)
    counter: SmokeCounter | None = None  # drafter arms
    acceptance: SmokeAcceptance | None = None  # drafter arms with drafter.expect


class SmokeIdentityCheck(RecordModel):
    """A drafter arm's smoke answers against its baseline's, made once both exist."""

    kind: Literal["identity"] = "identity"
    arm: str  # the drafter
    baseline: str
    key: str  # the drafter's check key (it covers the baseline's definition)
    wall: float
    status: SmokeOutcome
    compared: int
    item_id: str | None = None  # the first item that differs
    char_index: int | None = None
    drafter_text: str | None = None  # around the divergence
    baseline_text: str | None = None
    # The divergence that stopped it (real, or unknown: no logprobs), and the near-ties
    # of the target's that were recorded and let pass (lossless up to numerics).
    divergence: SmokeDivergence | None = None
    near_ties: list[SmokeDivergence] = Field(default_factory=list)
    near_tie_margin: float | None = None
    reason: str | None = None
    log_line: str | None = None  # the drafter's engine log
    log_path: str | None = None


# One line of smoke/arms.jsonl, either kind.
SmokeRecord = Annotated[SmokeArmCheck | SmokeIdentityCheck, Field(discriminator="kind")]
SMOKE_RECORD: TypeAdapter[SmokeArmCheck | SmokeIdentityCheck] = TypeAdapter(SmokeRecord)


def read_smoke_records(path: Path) -> list[SmokeArmCheck | SmokeIdentityCheck]:
    """smoke/arms.jsonl in the order written (empty when there is none); a bad line is
    an InputError naming the file, line and field."""
    if not path.exists():
        return []
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(SMOKE_RECORD.validate_json(line))
            except ValidationError as err:
                first = err.errors()[0]
                loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
                raise InputError(f"{path}: line {n}: field {loc}: {first['msg']}") from None
    return out


def turn_item_id(item_id: str, turn: int) -> str:
    """A later turn's own id (its texts compared and its records kept apart)."""
    return item_id if turn == 1 else f"{item_id}#turn{turn}"


def session_item_id(item_id: str) -> str:
    """The item a request belongs to, whichever turn of its session it is."""
    return item_id.split("#turn", 1)[0]
