"""The pre-registration: every field a study fixes before GPU time is spent.

Strict throughout: an unknown key is an error (a typo such as `concurency:` must
never be silently ignored), and every default is written out in the seal.
"""

from __future__ import annotations

import datetime
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from harness.dialects import Dialect
from harness.engines import ENGINE_KINDS, get_engine_kind
from harness.testengine.spec import ScriptedEngineSpec
from harness.workloads.kinds import SCORED_KINDS, TaskKind

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=64)]


def registered_engine(name: str) -> str:
    """An arm's `engine:`, one of the kinds in the engine registry (harness/engines/
    __init__.py, ENGINE_KINDS): the one list of engine names, read when a study is
    validated, so a kind registered at run time is accepted too."""
    if name not in ENGINE_KINDS:
        known = ", ".join(repr(k) for k in ENGINE_KINDS)
        raise ValueError(f"unknown engine {name!r} (known engines: {known})")
    return name


EngineName = Annotated[str, AfterValidator(registered_engine)]
TaskUse = Literal["speed", "accuracy", "identity"]
Positive = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


# --- what it runs on --------------------------------------------------------------


class Hardware(Strict):
    """The hardware the study is registered for, with the published figures the
    plan's roofline estimate uses."""

    gpu: str
    count: PositiveInt = 1
    memory_bandwidth_gb_s: Positive  # published HBM bandwidth
    dense_tflops: Positive  # published dense tensor throughput at the model's precision
    notes: str | None = None


class ModelSpec(Strict):
    id: str  # hub id or local path
    revision: str | None = None  # pinned commit; None only for local paths
    served_name: str | None = None  # name requests use; defaults to id
    quantization: str | None = None
    params_billion: Positive
    weight_bytes_per_param: Positive = 2.0
    max_model_len: PositiveInt | None = None
    chat_template_kwargs: dict[str, Any] = Field(default_factory=lambda: {"enable_thinking": False})

    @property
    def request_name(self) -> str:
        return self.served_name or self.id


# --- arms ---------------------------------------------------------------------------


class Launch(Strict):
    """How the harness starts an engine: from its own interpreter or command,
    never by importing it (vLLM and SGLang cannot share an environment)."""

    python: str | None = None  # the engine environment's interpreter
    command: list[str] | None = None  # or an explicit executable prefix, e.g. ["vllm"]
    env: dict[str, str] = Field(default_factory=dict)
    extra_args: list[str] = Field(default_factory=list)
    # The dtype the engine computes in (vLLM --dtype). `cpu_native` (CPU build only):
    # bfloat16 where oneDNN builds a bfloat16 matmul (AVX-512), float32 elsewhere (AVX2),
    # float16 where bfloat16 would run on AMX tiles (no knee inside tens of users), so a
    # step is memory-bound at one user and its ridge within reach on each kind of host
    # (harness/engines/cpu_dtype.py);
    # what it resolved to is recorded with each engine start. None: the engine decides.
    dtype: Literal["auto", "bfloat16", "float16", "float32", "cpu_native"] | None = None
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] | None = None  # None: pick a free port
    startup_timeout_s: Positive = 1200.0
    stop_grace_s: Positive = 30.0

    @model_validator(mode="after")
    def _one_way_to_start(self) -> Launch:
        if self.python is not None and self.command is not None:
            raise ValueError("give either python or command, not both")
        return self


class Attach(Strict):
    """An OpenAI-compatible endpoint the user runs; the harness neither starts nor stops it."""

    base_url: str
    metrics: Dialect
    served_model: str

    @field_validator("base_url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not re.match(r"^https?://", v):
            raise ValueError("expected an http:// or https:// URL")
        return v.rstrip("/")


class DrafterExpect(Strict):
    # Tokens per round at one user, from the client's chunks over the smoke prompts: a
    # drafter below it (a head left stale by a changed target) stops the run there.
    acceptance_length_min: Annotated[float, Field(ge=1)] | None = None


class SyntheticAcceptance(Strict):
    """A control arm's acceptance, fixed by the engine whatever its drafts say (issue 32):
    the arm measures what a round costs at a known acceptance, apart from any drafter's
    quality. Its text is not the target's, so identity and accuracy are never judged on
    it, and no bar reads its speed. Exactly one of `acceptance_length` (mean tokens a
    round, 1 to k + 1; vLLM's synthetic_acceptance_length, SGLang's
    SGLANG_SIMULATE_ACC_LEN) or `rates` (per-position unconditional chances that the
    first i + 1 drafts are all kept, non-increasing; vLLM's synthetic_acceptance_rates)."""

    acceptance_length: Annotated[float, Field(ge=1)] | None = None
    rates: list[Annotated[float, Field(ge=0, le=1)]] | None = None

    @model_validator(mode="after")
    def _one(self) -> SyntheticAcceptance:
        if (self.acceptance_length is None) == (self.rates is None):
            raise ValueError("give exactly one of acceptance_length or rates")
        rates = self.rates or []
        if any(rates[i] > rates[i - 1] for i in range(1, len(rates))):
            raise ValueError(f"rates must not increase with the position, got {rates}")
        return self

    def unconditional_rates(self, k: int) -> list[float]:
        """Per position, the chance the first i + 1 drafts are all kept; a length as vLLM
        0.32 resolves it (config/speculative.py, the minimum-variance schedule)."""
        if self.rates is not None:
            return list(self.rates)
        drafts = (self.acceptance_length or 1.0) - 1
        full = int(drafts)
        return ([1.0] * full + [drafts - full] + [0.0] * k)[:k]

    def tokens_per_round(self, k: int) -> float:
        return 1.0 + sum(self.unconditional_rates(k))

    def label(self, k: int) -> str:
        if self.acceptance_length is not None:
            return f"synthetic acceptance length {self.acceptance_length:g}"
        return ("synthetic acceptance rates [" + ", ".join(f"{r:g}" for r in self.rates or [])
                + f"] ({self.tokens_per_round(k):.3g} tokens a round)")


# One range of a k schedule: batch sizes first..last (inclusive; None: open) draft k.
KRange = tuple[PositiveInt, PositiveInt | None, Annotated[int, Field(ge=0)]]


def k_schedule_problem(ranges: list[tuple[int, int | None, int]], max_k: int) -> str | None:
    """What is wrong with a k schedule, or None: it covers every batch size from 1, in
    order, without gaps or overlaps, the last range open, no k above max_k."""
    if not ranges:
        return "expected at least one [first, last, k] range"
    expect = 1
    for i, (first, last, k) in enumerate(ranges):
        if first != expect:
            return (f"range {i + 1} starts at batch {first}, expected {expect} (the ranges"
                    " cover every batch size from 1, in order)")
        if last is None and i != len(ranges) - 1:
            return f"range {i + 1} is open (last null) but is not the last range"
        if last is not None and last < first:
            return f"range {i + 1} ends at {last}, before its first batch {first}"
        if k > max_k:
            return f"range {i + 1} drafts k={k}, above num_draft_tokens {max_k}"
        expect = (last or first) + 1
    if ranges[-1][1] is not None:
        return "the last range must be open (last null), so every batch size has a k"
    return None


class Drafter(Strict):
    # specbench spelling, lowercase (ngram, eagle3, eagle, draft_model, dflash, mtp,
    # standalone, suffix, ...). Free text on purpose: the engine is the authority on
    # which methods exist, and pre-flight names unknown ones.
    method: str
    model: str | None = None
    revision: str | None = None
    num_draft_tokens: PositiveInt
    # The draft weights' precision: `checkpoint` keeps the draft checkpoint's own (its
    # config.json quantization_config, else unquantized); any other value is an engine
    # quantization method (fp8, ...). Registered because SGLang otherwise gives the
    # draft the target's --quantization, quantizing a BF16 drafter on the fly.
    quantization: Annotated[str, Field(min_length=1)] = "checkpoint"
    options: dict[str, Any] = Field(default_factory=dict)  # engine-specific extras
    # Only for the plan's GPU-time estimate, never for a verdict.
    assumed_acceptance_length: Positive | None = None
    # The roofline prediction beside each measured speedup (analysis/predict.py): the
    # draft model's size (None: no draft weights, e.g. n-gram lookup, costed at 0) and
    # its forward passes per round (None: one per draft token; a block drafter: 1).
    params_billion: Positive | None = None
    draft_steps: PositiveInt | None = None
    # What this drafter must at least reach, checked in the smoke stage (run/smoke.py).
    expect: DrafterExpect | None = None
    # The base model this checkpoint was trained against, when it is not the study's
    # target on purpose: `validate` then accepts a checkpoint config naming it
    # (prereg/drafter_base.py), and the verdict page shows it.
    trained_against: str | None = None
    # A control arm: the engine accepts drafts by these chances, not by their content.
    synthetic: SyntheticAcceptance | None = None
    # Draft tokens by running batch size: inclusive [first, last, k] ranges from batch 1,
    # the last open (null), k = 0 drafting nothing, none above num_draft_tokens (vLLM
    # 0.32's num_speculative_tokens_per_batch_size). The surface's verification arm
    # carries the schedule the surface proposed (Study.schedule_arms).
    k_schedule: list[KRange] | None = None

    @model_validator(mode="after")
    def _synthetic_fits(self) -> Drafter:
        syn, k = self.synthetic, self.num_draft_tokens
        if syn is None:
            return self
        if syn.acceptance_length is not None and syn.acceptance_length > k + 1:
            raise ValueError(f"synthetic.acceptance_length {syn.acceptance_length:g} is above"
                             f" k + 1 = {k + 1} (num_draft_tokens {k})")
        if syn.rates is not None and len(syn.rates) != k:
            raise ValueError(f"synthetic.rates needs {k} entries (num_draft_tokens), got"
                             f" {len(syn.rates)}")
        if self.expect is not None:
            raise ValueError("expect is for a drafter whose acceptance is measured; a synthetic"
                             " one's is set")
        return self

    @model_validator(mode="after")
    def _k_schedule_fits(self) -> Drafter:
        if self.k_schedule is None:
            return self
        problem = k_schedule_problem(self.k_schedule, self.num_draft_tokens)
        if problem is not None:
            raise ValueError(f"k_schedule: {problem}")
        if self.synthetic is not None:
            raise ValueError("k_schedule is for a drafter whose acceptance is measured; a"
                             " control arm's round is costed at one k")
        return self


class Arm(Strict):
    name: Name
    engine: EngineName
    description: str | None = None
    launch: Launch | None = None
    attach: Attach | None = None
    drafter: Drafter | None = None
    baseline: Name | None = None  # its no-drafter arm on the same engine; None = a baseline
    max_running_requests: PositiveInt | None = None
    # SGLang only: --min-free-slots-delay, admissions held until this many running
    # slots are free (0 or 1: off). None leaves SGLang's default, which turns it on by
    # itself for DFLASH and DSPARK only, so a drafter arm and its baseline would queue
    # new requests differently (harness/engines/sglang_engine.py).
    min_free_slots_delay: Annotated[int, Field(ge=0)] | None = None
    # The declared model of the scripted test engine (dry runs, tests).
    scripted: ScriptedEngineSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Arm:
        if (self.launch is None) == (self.attach is None):
            raise ValueError("give exactly one of launch (start the engine) or attach (use a running one)")
        if self.drafter is not None and self.baseline is None:
            raise ValueError("an arm with a drafter needs a baseline: its no-drafter arm on the same engine")
        if self.drafter is None and self.baseline is not None:
            raise ValueError("baseline is for drafter arms; a no-drafter arm is itself a baseline")
        if get_engine_kind(self.engine).scripted_spec != (self.scripted is not None):
            if self.scripted is None:
                raise ValueError(f"scripted is required for engine {self.engine!r} (the"
                                 " scripted test engine's declared model)")
            raise ValueError(f"scripted is only allowed for the scripted test engine, not"
                             f" engine {self.engine!r}")
        if self.min_free_slots_delay is not None and self.engine != "sglang":
            raise ValueError("min_free_slots_delay is an SGLang setting (engine 'sglang' only)")
        if (self.launch is not None and self.launch.dtype == "cpu_native"
                and self.engine != "vllm-cpu"):
            raise ValueError("launch.dtype cpu_native is for the CPU build (engine 'vllm-cpu' only)")
        if self.is_control:
            if self.attach is not None:
                raise ValueError("drafter.synthetic needs the engine started by specbench"
                                 " (launch): an attached engine's acceptance is not ours to set")
            problem = get_engine_kind(self.engine).synthetic_problem(self)
            if problem is not None:
                raise ValueError(f"drafter.synthetic: {problem}")
        if self.drafter is not None and self.drafter.k_schedule is not None:
            if self.attach is not None:
                raise ValueError("drafter.k_schedule needs the engine started by specbench"
                                 " (launch): an attached engine's k is not ours to set")
            problem = get_engine_kind(self.engine).k_schedule_problem(self)
            if problem is not None:
                raise ValueError(f"drafter.k_schedule: {problem}")
        return self

    @property
    def is_baseline(self) -> bool:
        return self.drafter is None

    @property
    def is_control(self) -> bool:
        """A control arm: synthetic acceptance (drafter.synthetic), never judged."""
        return self.drafter is not None and self.drafter.synthetic is not None


# --- loads ----------------------------------------------------------------------------


class RequestCount(Strict):
    """Measured requests per closed-loop cell: max(min, per_user x concurrency)."""

    min: PositiveInt = 64
    per_user: PositiveInt = 8

    def for_concurrency(self, concurrency: int) -> int:
        return max(self.min, self.per_user * concurrency)


class ClosedLoop(Strict):
    concurrency: list[PositiveInt]
    requests: RequestCount = Field(default_factory=RequestCount)
    warmup_per_user: Annotated[int, Field(ge=0)] = 1
    # Users' first warm-up requests cut to 1/N, 2/N, ... N/N of max_tokens, so users whose
    # requests all have one length do not end on one engine step, every round, in
    # lockstep (N sends at once: a turnaround the client cannot meet at 32 users, and a
    # load no deployment sees). Warm-ups are never measured (harness/measure/patterns.py).
    stagger_warmup: bool = False
    max_duration_s: Positive | None = None

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("expected at least one concurrency level")
        if len(set(v)) != len(v):
            raise ValueError("concurrency levels must be distinct")
        if v != sorted(v):
            raise ValueError("concurrency levels must be listed in increasing order")
        return v


class LatencyObjective(Strict):
    """What 'sustains' means for the fleet figure."""

    metric: Literal["ttft", "tpot", "latency"] = "ttft"
    percentile: Annotated[float, Field(gt=0, lt=100)] = 99.0
    max_s: Positive = 2.0


class OpenLoop(Strict):
    task: Name  # which task's prompts the arrivals draw
    rates_relative_to_knee: list[Positive]
    arrival: Literal["poisson", "gamma"] = "poisson"
    burstiness: Positive = 1.0  # gamma shape; 1.0 is Poisson
    seed: int = 0
    duration_s: Positive | None = None
    requests: PositiveInt | None = None
    warmup: Annotated[int, Field(ge=0)] = 0
    objective: LatencyObjective = Field(default_factory=LatencyObjective)
    fleet_traffic_rps: Positive = 100.0  # the stated traffic the GPU count is given for

    @model_validator(mode="after")
    def _bounded(self) -> OpenLoop:
        if self.duration_s is None and self.requests is None:
            raise ValueError("give duration_s or requests, so each open-loop cell ends")
        if not self.rates_relative_to_knee:
            raise ValueError("expected at least one rate")
        return self


class Loads(Strict):
    closed_loop: ClosedLoop
    open_loop: OpenLoop | None = None


# --- tasks -------------------------------------------------------------------------


class HubSource(Strict):
    """Load the task from a hub dataset instead of the vendored copy (needs network)."""

    dataset: str
    revision: str
    config: str | None = None  # the dataset's configuration (e.g. "main" for openai/gsm8k)
    split: str | None = None
    # speed_bench: the categories kept, in the dataset's order (None: every one), and what
    # to do with placeholder rows. Filled from the task's own fields (TaskSpec below).
    categories: list[str] | None = None
    placeholders: Literal["refuse", "drop"] | None = None


# SPEED-Bench (nvidia/SPEED-Bench): its configurations, from its dataset card.
SPEED_BENCH_DATASET = "nvidia/SPEED-Bench"
SpeedBenchConfig = Literal["qualitative", "throughput_1k", "throughput_2k", "throughput_8k",
                           "throughput_16k", "throughput_32k"]
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class TaskSpec(Strict):
    name: Name
    kind: TaskKind
    uses: list[TaskUse]
    max_tokens: PositiveInt
    source: HubSource | None = None  # None: the vendored, sha256-checked copy
    subset: PositiveInt | None = None  # a seeded sample of this many items (small studies)
    subset_seed: int = 0
    # Identity cells compare this many prompts (the first of the task's order).
    identity_items: PositiveInt = 32
    # first: each item's first turn only. all: a multi-turn item (MT-Bench's two turns,
    # SPEED-Bench's multi-turn rows) is one user session, each later turn sent after the
    # answer before it arrives, with that answer in its messages; every turn a request.
    turns: Literal["first", "all"] = "first"
    # speed_bench only: the dataset's configuration, the categories kept (None: all) and
    # the commit it is read at, from the hub cache (`specbench fetch` puts it there). They
    # fill `source`, which the loaders read (harness/workloads/speed_bench.py).
    config: SpeedBenchConfig | None = None
    categories: list[str] | None = None
    revision: str | None = None
    # Rows the hub publishes as a placeholder sentence (harness/workloads/speed_bench.py):
    # never sent. refuse (None: the default) refuses the study; drop measures the rest,
    # the dropped counted by category in the manifest and on the report.
    placeholders: Literal["refuse", "drop"] | None = None

    @field_validator("uses")
    @classmethod
    def _uses(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("expected at least one of speed, accuracy, identity")
        if len(set(v)) != len(v):
            raise ValueError("each use may appear once")
        return v

    @model_validator(mode="after")
    def _scorable(self) -> TaskSpec:
        if self.turns == "all" and self.kind in SCORED_KINDS:
            raise ValueError(f"turns: all is for multi-turn tasks (chat, speed_bench); a"
                             f" {self.kind} item has one turn")
        if "accuracy" in self.uses and self.kind not in SCORED_KINDS:
            raise ValueError(
                f"{self.kind} has no correctness scorer; it cannot have the accuracy use"
            )
        return self

    @field_validator("categories")
    @classmethod
    def _categories(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or len(set(v)) != len(v)):
            raise ValueError("expected a non-empty list of distinct categories")
        return v

    @model_validator(mode="after")
    def _speed_bench(self) -> TaskSpec:
        own = {"config": self.config, "categories": self.categories, "revision": self.revision,
               "placeholders": self.placeholders}
        if self.kind != "speed_bench":
            given = [k for k, v in own.items() if v is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: only a speed_bench task takes these")
            return self
        if self.config is None or self.revision is None:
            raise ValueError("a speed_bench task needs config (e.g. qualitative) and revision"
                             f" (the {SPEED_BENCH_DATASET} commit it is read at)")
        if not _COMMIT.match(self.revision):
            raise ValueError(f"revision {self.revision!r}: expected a 40-hex commit sha of"
                             f" {SPEED_BENCH_DATASET} (a branch moves)")
        source = HubSource(dataset=SPEED_BENCH_DATASET, revision=self.revision,
                           config=self.config, split="test", categories=self.categories,
                           placeholders=self.placeholders)
        if self.source is not None and self.source != source:
            raise ValueError("a speed_bench task names its data by config, categories and"
                             " revision, not by source")
        # Frozen model: set once here, so every loader reads the task through `source`.
        object.__setattr__(self, "source", source)
        return self


class Sampling(Strict):
    temperature: Annotated[float, Field(ge=0)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    seed: int = 0
    ignore_eos: bool = False


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


# --- bars --------------------------------------------------------------------------


class SpeedBar(Strict):
    threshold: Positive = 2.0
    concurrencies: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4])
    statistic: Literal["point", "ci_lower"] = "point"
    best_drafter: Literal["per_task", "pooled"] = "per_task"
    require: Literal["every_task", "any_task"] = "every_task"


class IdentityBar(Strict):
    concurrency: PositiveInt = 1
    min_identical_share: Annotated[float, Field(ge=0, le=1)] = 1.0
    arms: Literal["best_drafter", "all_drafters"] = "best_drafter"
    # What "identical" reads (README, "Greedy identity"): `exact`, every output the same
    # text; `beyond_near_ties`, an output whose first divergent token was a near-tie of
    # the target's (logprob margin below near_tie_margin on either side) counts as
    # identical -- lossless up to numerics -- and is listed as `numeric`.
    count: Literal["exact", "beyond_near_ties"] = "exact"
    near_tie_margin: Annotated[float, Field(gt=0)] = 0.5


class AccuracyBar(Strict):
    tasks: list[Name]
    rule: Literal["within_baseline_wilson"] = "within_baseline_wilson"
    level: Annotated[float, Field(gt=0, lt=1)] = 0.95
    arms: Literal["best_drafter", "all_drafters"] = "best_drafter"


class KneeBar(Strict):
    required: bool = True  # the pass bar needs the knee of the best drafter(s) located
    # The knee is read on the point estimates (harness/analysis/knee.py). A point still
    # above 1.0 at the top registered level is a bound ("> 64"), and one already at or
    # below 1.0 at the first level a bound ("<= 1"): neither is a located crossing, so
    # not_located unless the study registers that such a bound passes.
    beyond_top: Literal["not_located", "pass"] = "not_located"
    below_first: Literal["not_located", "pass"] = "not_located"


class PassBar(Strict):
    speed: SpeedBar = Field(default_factory=SpeedBar)
    identity: IdentityBar | None = Field(default_factory=IdentityBar)
    accuracy: AccuracyBar | None = None
    knee: KneeBar = Field(default_factory=KneeBar)


class StopBar(Strict):
    threshold: Positive = 1.3
    concurrencies: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4])
    statistic: Literal["point", "ci_upper"] = "point"
    # Fires when the best drafter is below the threshold at every listed
    # concurrency, for every task (all_tasks) or for any task (any_task).
    fires_when: Literal["all_tasks", "any_task"] = "all_tasks"
    skip: Literal["remaining_speed_cells"] = "remaining_speed_cells"


class CheckBar(Strict):
    threshold: Positive = 5.0
    statistic: Literal["point"] = "point"
    action: Literal["rerun_baseline"] = "rerun_baseline"
    # The rerun agrees when the baseline's per-user speed differs by at most this share.
    agree_within: Annotated[float, Field(gt=0, lt=1)] = 0.10
    # How agreement is judged (harness/analysis/stop_check.py), every session of the
    # baseline rerun once. session_spread: the reruns' mean log speed against the
    # original sessions', within a two-sample t tolerance from the sessions' own spread
    # (at bars.intervals.level), never tighter than agree_within (a difference within
    # it always agrees; with one session a side no spread is measured and agree_within
    # alone judges). So a sound baseline disagrees at about the interval's error rate,
    # where a fixed +-10 % called the lab's sessions (log sd 0.086) "disagreeing" ~30 %
    # of the time. fixed_share: agree_within alone, on the means of the session medians.
    agreement: Literal["session_spread", "fixed_share"] = "session_spread"


class Intervals(Strict):
    level: Annotated[float, Field(gt=0, lt=1)] = 0.95
    # The interval over repeated sessions (harness/analysis/intervals.py). t_sessions: a
    # t interval on the paired sessions' log ratios; bootstrap: sessions resampled, then
    # units within them. auto: t_sessions below 30 sessions, bootstrap from there: a
    # percentile bootstrap over few sessions cannot reach past the extreme ones (its
    # "95 %" covered ~75 % at 3 sessions; benchmarks/interval_coverage.py). One session:
    # the within-session bootstrap, whatever this says, marked as such.
    method: Literal["auto", "t_sessions", "bootstrap"] = "auto"
    # The t interval's session variance (harness/analysis/pooling.py): per_level, each
    # level's own sessions (n - 1 df); stage_cells, pooled over the cells one engine start
    # measures (a plan stage's levels and tasks, per drafter arm), with Satterthwaite df,
    # where a test of equal spread across those cells holds, else per level.
    pooling: Literal["per_level", "stage_cells"] = "per_level"
    bootstrap_resamples: PositiveInt = 2000
    seed: int = 0


class Decomposition(Strict):
    # A speedup whose two factors (tokens per round, round cost: analysis/decompose.py)
    # explain it to worse than this share is flagged, and the report says which moved.
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.05


class Bars(Strict):
    pass_: PassBar = Field(default_factory=PassBar, alias="pass")
    stop: StopBar = Field(default_factory=StopBar)
    check: CheckBar = Field(default_factory=CheckBar)
    intervals: Intervals = Field(default_factory=Intervals)
    decomposition: Decomposition = Field(default_factory=Decomposition)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Surface(Strict):
    """The round-cost surface (issue 32), a stage after the registered ones: the arm
    `drafter` names, copied at each k with its acceptance set to each L (control arms,
    `surface-k<k>-L<L>`, drafts kept by that chance whatever they say), measured at each
    level on each task against that arm's baseline. It says what a round costs at each k
    and load apart from any drafter's quality, and the acceptance a drafter needs there
    to pay (harness/analysis/surface.py). Never read by a bar. An L above k + 1 cannot be
    set at that k and is left out there."""

    drafter: Name  # the drafter arm copied: engine, launch, method, baseline
    k: Annotated[list[PositiveInt], Field(min_length=1)]
    acceptance_length: Annotated[list[Annotated[float, Field(ge=1)]], Field(min_length=2)]
    concurrency: Annotated[list[PositiveInt], Field(min_length=1)]
    tasks: list[Name] | None = None  # None: every task with the speed use
    # Stage 5: the k schedule proposed from the surface, run by the drafter's engine
    # (`surface-schedule-<task>`, its drafter with drafter.k_schedule set once stage 4
    # is measured) at every registered closed-loop level, its measured speedup beside
    # the predicted one. A level whose measured speedup (its interval's upper bound) is
    # below collapse_below x the predicted one is flagged a collapse (vllm#49548: a
    # schedule's throughput falling apart at its batch-size threshold).
    verify_schedule: bool = False
    collapse_below: Annotated[float, Field(gt=0, le=1)] = 0.8

    @field_validator("k", "acceptance_length", "concurrency")
    @classmethod
    def _distinct_ascending(cls, values: list) -> list:
        if len(set(values)) != len(values):
            raise ValueError(f"values repeat: {values}")
        return sorted(values)

    def lengths_at(self, k: int) -> list[float]:
        return [length for length in self.acceptance_length if length <= k + 1]


SURFACE_PREFIX = "surface-"


def surface_arm_name(k: int, length: float) -> str:
    return f"{SURFACE_PREFIX}k{k}-L{length:g}"


SCHEDULE_PREFIX = f"{SURFACE_PREFIX}schedule-"


def schedule_arm_name(task: str) -> str:
    return f"{SCHEDULE_PREFIX}{task}"


class PlanEstimate(Strict):
    """Assumptions behind `specbench plan`'s GPU-time estimate (never a result)."""

    assumed_acceptance_length: Positive = 2.5  # for drafters that state none
    mean_output_tokens: Literal["max_tokens"] | PositiveInt = "max_tokens"
    engine_start_s: Positive = 180.0


# --- the study ---------------------------------------------------------------------


class Study(Strict):
    title: str
    registered: str  # registration date, ISO 8601
    hardware: Hardware
    model: ModelSpec
    arms: list[Arm]
    loads: Loads
    tasks: list[TaskSpec]
    sampling: Sampling = Field(default_factory=Sampling)
    recording: Recording = Field(default_factory=Recording)
    bars: Bars = Field(default_factory=Bars)
    plan_estimate: PlanEstimate = Field(default_factory=PlanEstimate)
    surface: Surface | None = None

    @field_validator("registered", mode="before")
    @classmethod
    def _date(cls, v: object) -> object:
        if isinstance(v, datetime.date):  # YAML reads an unquoted date as a date
            return v.isoformat()
        if isinstance(v, str) and not re.match(r"^\d{4}-\d{2}-\d{2}$", v):
            raise ValueError("expected a date as YYYY-MM-DD")
        return v

    @model_validator(mode="after")
    def _cross_references(self) -> Study:
        # Messages carry their own field path so the loader can point at the line.
        problems: list[tuple[tuple, str]] = []
        if not self.arms:
            problems.append((("arms",), "expected at least one arm"))
        if not self.tasks:
            problems.append((("tasks",), "expected at least one task"))
        by_name: dict[str, int] = {}
        for i, arm in enumerate(self.arms):
            if arm.name in by_name:
                problems.append((("arms", i, "name"), f"duplicate arm name {arm.name!r}"))
            by_name.setdefault(arm.name, i)
        for i, arm in enumerate(self.arms):
            if arm.baseline is None:
                continue
            j = by_name.get(arm.baseline)
            if j is None:
                problems.append((("arms", i, "baseline"), f"no arm named {arm.baseline!r}"))
                continue
            base = self.arms[j]
            if base.engine != arm.engine:
                problems.append(
                    (
                        ("arms", i, "baseline"),
                        f"baseline {base.name!r} runs on {base.engine}, this arm on {arm.engine}:"
                        " a speedup is only measured against the same engine",
                    )
                )
            elif base.drafter is not None:
                problems.append((("arms", i, "baseline"), f"baseline {base.name!r} has a drafter"))
        task_names: set[str] = set()
        for i, task in enumerate(self.tasks):
            if task.name in task_names:
                problems.append((("tasks", i, "name"), f"duplicate task name {task.name!r}"))
            task_names.add(task.name)
        levels = set(self.loads.closed_loop.concurrency)
        for key, conc in (
            (("bars", "pass", "speed", "concurrencies"), self.bars.pass_.speed.concurrencies),
            (("bars", "stop", "concurrencies"), self.bars.stop.concurrencies),
        ):
            missing = sorted(set(conc) - levels)
            if missing:
                problems.append((key, f"concurrencies {missing} are not closed-loop levels"))
        if self.bars.pass_.accuracy is not None:
            for k, name in enumerate(self.bars.pass_.accuracy.tasks):
                task = next((t for t in self.tasks if t.name == name), None)
                if task is None:
                    problems.append((("bars", "pass", "accuracy", "tasks", k), f"no task named {name!r}"))
                elif "accuracy" not in task.uses:
                    problems.append(
                        (("bars", "pass", "accuracy", "tasks", k), f"task {name!r} lacks the accuracy use")
                    )
        if self.loads.open_loop is not None and self.loads.open_loop.task not in task_names:
            problems.append((("loads", "open_loop", "task"), f"no task named {self.loads.open_loop.task!r}"))
        if not any("speed" in t.uses for t in self.tasks):
            problems.append((("tasks",), "expected at least one task with the speed use"))
        if self.surface is not None:
            problems.extend(self._surface_problems(by_name, levels))
        if problems:
            raise CrossReferenceError(problems)
        return self

    def _surface_problems(self, by_name: dict[str, int], levels: set[int]
                          ) -> list[tuple[tuple, str]]:
        surface = self.surface
        assert surface is not None
        out: list[tuple[tuple, str]] = []
        j = by_name.get(surface.drafter)
        template = self.arms[j] if j is not None else None
        if template is None:
            out.append((("surface", "drafter"), f"no arm named {surface.drafter!r}"))
        elif template.drafter is None or template.is_control:
            out.append((("surface", "drafter"), f"arm {surface.drafter!r} is not a drafter arm"
                        " with a real drafter (the surface copies its engine and method)"))
        elif template.attach is not None:
            out.append((("surface", "drafter"), f"arm {surface.drafter!r} is attached: the"
                        " surface sets acceptance on engines specbench starts (launch)"))
        else:
            problem = get_engine_kind(template.engine).synthetic_problem(template)
            if problem is not None:
                out.append((("surface", "drafter"), problem))
        for i, k in enumerate(surface.k):
            if not surface.lengths_at(k):
                out.append((("surface", "k", i), f"k={k}: every acceptance_length is above"
                            f" k + 1 = {k + 1}"))
        missing = sorted(set(surface.concurrency) - levels)
        if missing:
            out.append((("surface", "concurrency"), f"concurrencies {missing} are not"
                        " closed-loop levels (each surface cell is paired with its baseline's"
                        " cell at that level)"))
        speed_tasks = {t.name for t in self.tasks if "speed" in t.uses}
        for i, name in enumerate(surface.tasks or []):
            if name not in speed_tasks:
                out.append((("surface", "tasks", i), f"no task named {name!r} with the"
                            " speed use"))
        names = {a.name for a in self.arms}
        if surface.verify_schedule:
            for task in self.surface_tasks():
                if schedule_arm_name(task) in names:
                    out.append((("surface",), f"arm name {schedule_arm_name(task)!r} is"
                                " the schedule verification's own; rename the registered arm"))
                elif len(schedule_arm_name(task)) > 64:
                    out.append((("surface", "verify_schedule"), f"task {task!r}: its"
                                f" verification arm's name {schedule_arm_name(task)!r} is over"
                                " 64 characters; shorten the task's name"))
            if j is not None:
                problem = get_engine_kind(self.arms[j].engine).k_schedule_problem(self.arms[j])
                if problem is not None:
                    out.append((("surface", "verify_schedule"), problem))
        for k in surface.k:
            for length in surface.lengths_at(k):
                if surface_arm_name(k, length) in names:
                    out.append((("surface",), f"arm name {surface_arm_name(k, length)!r} is"
                                " the surface's own; rename the registered arm"))
        if template is not None and not out:  # each control arm as its engine can set it
            out += [(("surface", "acceptance_length"), f"arm {arm.name!r}: {problem}")
                    for arm in self.surface_arms()
                    if (problem := get_engine_kind(arm.engine).synthetic_problem(arm))]
        return out

    def surface_tasks(self) -> list[str]:
        if self.surface is None:
            return []
        return self.surface.tasks or [t.name for t in self.tasks if "speed" in t.uses]

    def surface_arms(self) -> list[Arm]:
        """The surface's control arms, made from the registered drafter arm on each call
        (never stored in `arms`, so a study read back from study.json gains none)."""
        if self.surface is None:
            return []
        template = self.arm(self.surface.drafter)
        assert template.drafter is not None
        out = []
        for k in self.surface.k:
            for length in self.surface.lengths_at(k):
                drafter = template.drafter.model_copy(update={
                    "num_draft_tokens": k, "expect": None,
                    "assumed_acceptance_length": length,
                    "synthetic": SyntheticAcceptance(acceptance_length=length)})
                out.append(template.model_copy(update={
                    "name": surface_arm_name(k, length), "drafter": drafter,
                    "description": f"round-cost surface: {template.name} at k={k},"
                                   f" acceptance set to {length:g}"}))
        return out

    def schedule_arms(self, k_schedules: dict[str, list[KRange]] | None = None) -> list[Arm]:
        """The schedule verification's arms (`surface.verify_schedule`), one per surface
        task: the surface's drafter arm running, per running batch size, the k the
        surface proposed for that task. The schedule is known only once stage 4 is
        measured (the run keeps it in the manifest, `k_schedules`, by arm); without it
        the arm is the drafter at its own k, which is what every reader but the engine
        start needs (its baseline, engine, method and largest k)."""
        if self.surface is None or not self.surface.verify_schedule:
            return []
        template = self.arm(self.surface.drafter)
        assert template.drafter is not None
        out = []
        for task in self.surface_tasks():
            name = schedule_arm_name(task)
            drafter = template.drafter.model_copy(update={
                "expect": None, "k_schedule": (k_schedules or {}).get(name)})
            out.append(template.model_copy(update={
                "name": name, "drafter": drafter,
                "description": f"the k schedule proposed from the round-cost surface for"
                               f" task {task}, run by {template.name}'s engine"}))
        return out

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        if name.startswith(SURFACE_PREFIX):
            for arm in [*self.surface_arms(), *self.schedule_arms()]:
                if arm.name == name:
                    return arm
        raise KeyError(name)

    def control_arms(self) -> list[dict[str, Any]]:
        """The control arms (drafter.synthetic), as the manifest, the verdict, the plan and
        the report name them: measured like any arm, never judged."""
        out = []
        for arm in self.arms:
            if arm.drafter is None or arm.drafter.synthetic is None:
                continue
            k = arm.drafter.num_draft_tokens
            syn = arm.drafter.synthetic
            out.append({"arm": arm.name, "baseline": arm.baseline, "engine": arm.engine,
                        "method": arm.drafter.method, "num_draft_tokens": k,
                        "synthetic": syn.model_dump(mode="json", exclude_none=True),
                        "tokens_per_round": syn.tokens_per_round(k),
                        "line": (f"{arm.name} ({arm.drafter.method}, k={k}, {syn.label(k)}):"
                                 " a control arm, its drafts kept by a set chance whatever"
                                 " they say; measured for the cost of a round, never judged"
                                 " (no identity or accuracy cells, read by no bar)")})
        return out

    def task(self, name: str) -> TaskSpec:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)


class CrossReferenceError(ValueError):
    """Problems that span fields; each carries the path it is about."""

    def __init__(self, problems: list[tuple[tuple, str]]) -> None:
        super().__init__("; ".join(msg for _, msg in problems))
        self.problems = problems
