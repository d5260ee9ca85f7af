"""An arm: an engine started (launch) or attached, with or without a drafter."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.dialects import Dialect
from harness.engines import get_engine_kind
from harness.prereg.schema.base import EngineName, Name, Positive, PositiveInt, Strict
from harness.testengine.spec import ScriptedEngineSpec


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
