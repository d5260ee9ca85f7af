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

    python: str | None = Field(
        None,
        description="The engine environment's Python interpreter, which runs the"
        " engine's server module (`${VAR}` is expanded when the engine"
        " starts). Give this or `command`, not both.",
    )
    command: list[str] | None = Field(
        None,
        description="Or an explicit executable prefix the engine's arguments follow,"
        ' e.g. `["vllm"]`.',
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables set for the engine process (`${VAR}` expanded).",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="Engine flags appended after the ones specbench"
        " writes, so they win (`${VAR}` expanded).",
    )
    # cpu_native: a step memory-bound at one user, with its ridge within reach, on each
    # kind of host (no knee inside tens of users with bfloat16 on AMX tiles).
    dtype: Literal["auto", "bfloat16", "float16", "float32", "cpu_native"] | None = Field(
        None,
        description="The dtype the engine computes in (--dtype). `cpu_native`, for the"
        " CPU build only: bfloat16 where oneDNN builds a bfloat16 matmul"
        " (AVX-512), float32 elsewhere (AVX2), float16 where bfloat16 would"
        " run on AMX tiles (harness/engines/launch/cpu_dtype.py); what it resolved"
        " to is recorded with each engine start. null: the engine decides.",
    )
    host: str = Field("127.0.0.1", description="The address the engine listens on.")
    port: Annotated[int, Field(ge=1, le=65535)] | None = Field(
        None, description="The engine's port; null: a free port picked at each start."
    )
    startup_timeout_s: Positive = Field(
        1200.0,
        description="Seconds an engine start may take to answer ready before it is"
        " stopped and the start counted as failed.",
    )
    stop_grace_s: Positive = Field(
        30.0,
        description="Seconds a stopped engine gets after SIGTERM before its process"
        " group is killed.",
    )

    @model_validator(mode="after")
    def _one_way_to_start(self) -> Launch:
        if self.python is not None and self.command is not None:
            raise ValueError("give either python or command, not both")
        return self


class Attach(Strict):
    """An OpenAI-compatible endpoint the user runs; the harness neither starts nor stops it."""

    base_url: str = Field(
        description="The endpoint's http:// or https:// URL, without"
        " `/v1` (a trailing `/` is dropped)."
    )
    metrics: Dialect = Field(description="Which engine's /metrics names the endpoint exports.")
    served_model: str = Field(description="The model name its requests use.")

    @field_validator("base_url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not re.match(r"^https?://", v):
            raise ValueError("expected an http:// or https:// URL")
        return v.rstrip("/")


class DrafterExpect(Strict):
    """What a drafter must at least reach, checked in the smoke stage (run/smoke.py)."""

    # Catches a head left stale by a changed target before any cell is measured.
    acceptance_length_min: Annotated[float, Field(ge=1)] | None = Field(
        None,
        description="Tokens per round at one user, from the client's chunks over the"
        " smoke prompts: a drafter below it stops the run in the smoke"
        " stage. null: not checked.",
    )


class SyntheticAcceptance(Strict):
    """A control arm's acceptance, fixed by the engine whatever its drafts say (issue 32):
    the arm measures what a round costs at a known acceptance, apart from any drafter's
    quality. Its text is not the target's, so identity and accuracy are never judged on
    it, and no bar reads its speed. Exactly one of `acceptance_length` (mean tokens a
    round, 1 to k + 1; vLLM's synthetic_acceptance_length, SGLang's
    SGLANG_SIMULATE_ACC_LEN) or `rates` (per-position unconditional chances that the
    first i + 1 drafts are all kept, non-increasing; vLLM's synthetic_acceptance_rates)."""

    acceptance_length: Annotated[float, Field(ge=1)] | None = Field(
        None,
        description="Mean tokens a round, 1 to k + 1 (vLLM's"
        " synthetic_acceptance_length, SGLang's SGLANG_SIMULATE_ACC_LEN).",
    )
    rates: list[Annotated[float, Field(ge=0, le=1)]] | None = Field(
        None,
        description="Per draft position i, the unconditional chance that the first"
        " i + 1 drafts are all kept: k entries, non-increasing (vLLM's"
        " synthetic_acceptance_rates).",
    )

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
        return (
            "synthetic acceptance rates ["
            + ", ".join(f"{r:g}" for r in self.rates or [])
            + f"] ({self.tokens_per_round(k):.3g} tokens a round)"
        )


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
            return (
                f"range {i + 1} starts at batch {first}, expected {expect} (the ranges"
                " cover every batch size from 1, in order)"
            )
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
    """A speculative drafter: its method, weights and k, as the engine is told them."""

    # Free text on purpose: the engine is the authority on which methods exist, and
    # pre-flight names unknown ones.
    method: str = Field(
        description="The speculative method in specbench's spelling, lowercase (ngram, eagle3,"
        " eagle, draft_model, dflash, mtp, standalone, suffix, ...), mapped to the"
        " engine's own name."
    )
    model: str | None = Field(
        None,
        description="The draft checkpoint: a hub id or local path (`${VAR}` expanded);"
        " null for a method without draft weights (ngram) or one that"
        " uses the target's own (mtp).",
    )
    revision: str | None = Field(
        None, description="The draft checkpoint's hub commit; only a 40-hex sha pins it."
    )
    num_draft_tokens: PositiveInt = Field(description="k: draft tokens proposed per round.")
    # Registered because SGLang otherwise gives the draft the target's --quantization,
    # quantizing a BF16 drafter on the fly.
    quantization: Annotated[str, Field(min_length=1)] = Field(
        "checkpoint",
        description="The draft weights' precision: `checkpoint` keeps the draft"
        " checkpoint's own (its config.json quantization_config,"
        " else unquantized); any other value is an engine"
        " quantization method (fp8, ...).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Engine-specific extras, passed verbatim: keys of vLLM's"
        " --speculative-config (e.g. prompt_lookup_max), or SGLang"
        " `--speculative-<key>` flags (true: the bare flag).",
    )
    assumed_acceptance_length: Positive | None = Field(
        None,
        description="Tokens per round assumed for the plan's GPU-time estimate only,"
        " never for a verdict; null: plan_estimate's.",
    )
    params_billion: Positive | None = Field(
        None,
        description="The draft model's parameters in billions, for the roofline"
        " prediction beside each measured speedup (analysis/predict.py);"
        " null: no draft weights (e.g. n-gram lookup), costed at 0.",
    )
    draft_steps: PositiveInt | None = Field(
        None,
        description="The draft model's forward passes per round in that prediction;"
        " null: one per draft token (a block drafter: 1).",
    )
    expect: DrafterExpect | None = Field(
        None,
        description="What this drafter must at least reach in the smoke stage; null:"
        " nothing checked.",
    )
    trained_against: str | None = Field(
        None,
        description="The base model this checkpoint was trained against, when it is"
        " not the study's target on purpose: `validate` then accepts a"
        " checkpoint config naming it (prereg/drafter_base.py), and the"
        " verdict page shows it.",
    )
    synthetic: SyntheticAcceptance | None = Field(
        None,
        description="Makes this a control arm: the engine keeps drafts by these"
        " chances, not by their content; never judged by a bar.",
    )
    k_schedule: list[KRange] | None = Field(
        None,
        description="Draft tokens by running batch size: inclusive [first, last, k]"
        " ranges from batch 1, the last open (null), k = 0 drafting"
        " nothing, none above num_draft_tokens (vLLM 0.32's"
        " num_speculative_tokens_per_batch_size). null: k at every batch"
        " size. The surface's verification arm carries the schedule the"
        " surface proposed (harness/plan_arms.py).",
    )

    @model_validator(mode="after")
    def _synthetic_fits(self) -> Drafter:
        syn, k = self.synthetic, self.num_draft_tokens
        if syn is None:
            return self
        if syn.acceptance_length is not None and syn.acceptance_length > k + 1:
            raise ValueError(
                f"synthetic.acceptance_length {syn.acceptance_length:g} is above"
                f" k + 1 = {k + 1} (num_draft_tokens {k})"
            )
        if syn.rates is not None and len(syn.rates) != k:
            raise ValueError(
                f"synthetic.rates needs {k} entries (num_draft_tokens), got {len(syn.rates)}"
            )
        if self.expect is not None:
            raise ValueError(
                "expect is for a drafter whose acceptance is measured; a synthetic one's is set"
            )
        return self

    @model_validator(mode="after")
    def _k_schedule_fits(self) -> Drafter:
        if self.k_schedule is None:
            return self
        problem = k_schedule_problem(self.k_schedule, self.num_draft_tokens)
        if problem is not None:
            raise ValueError(f"k_schedule: {problem}")
        if self.synthetic is not None:
            raise ValueError(
                "k_schedule is for a drafter whose acceptance is measured; a"
                " control arm's round is costed at one k"
            )
        return self


class Arm(Strict):
    """An arm: one engine serving the target, with a drafter or without (a baseline)."""

    name: Name = Field(
        description="The arm's name, unique in the study; cell ids and folders carry it."
    )
    engine: EngineName = Field(
        description="The engine kind that serves it: vllm, sglang,"
        " vllm-cpu or scripted (harness/engines"
        " registry)."
    )
    description: str | None = Field(None, description="Free text shown with the arm.")
    launch: Launch | None = Field(
        None, description="How specbench starts the engine; give this or `attach`."
    )
    attach: Attach | None = Field(
        None, description="A running endpoint to use instead; give this or `launch`."
    )
    drafter: Drafter | None = Field(
        None, description="The speculative drafter; null: a no-drafter (baseline) arm."
    )
    baseline: Name | None = Field(
        None,
        description="A drafter arm's no-drafter arm on the same engine, its speedups'"
        " denominator; required with a drafter, null on a baseline.",
    )
    max_running_requests: PositiveInt | None = Field(
        None,
        description="The engine's cap on requests running at once (vLLM"
        " --max-num-seqs, SGLang --max-running-requests); null: the"
        " engine's default.",
    )
    # Unset, SGLang turns it on by itself for DFLASH and DSPARK only, so a drafter arm and
    # its baseline would queue new requests differently (harness/engines/launch/sglang_engine.py).
    min_free_slots_delay: Annotated[int, Field(ge=0)] | None = Field(
        None,
        description="SGLang only (--min-free-slots-delay): admissions held until this"
        " many running slots are free (0 or 1: off). null: SGLang's"
        " default.",
    )
    scripted: ScriptedEngineSpec | None = Field(
        None,
        description="The scripted test engine's declared model (dry runs, tests);"
        " required for, and only for, engine `scripted`.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Arm:
        if (self.launch is None) == (self.attach is None):
            raise ValueError(
                "give exactly one of launch (start the engine) or attach (use a running one)"
            )
        if self.drafter is not None and self.baseline is None:
            raise ValueError(
                "an arm with a drafter needs a baseline: its no-drafter arm on the same engine"
            )
        if self.drafter is None and self.baseline is not None:
            raise ValueError("baseline is for drafter arms; a no-drafter arm is itself a baseline")
        if get_engine_kind(self.engine).scripted_spec != (self.scripted is not None):
            if self.scripted is None:
                raise ValueError(
                    f"scripted is required for engine {self.engine!r} (the"
                    " scripted test engine's declared model)"
                )
            raise ValueError(
                f"scripted is only allowed for the scripted test engine, not engine {self.engine!r}"
            )
        if self.min_free_slots_delay is not None and self.engine != "sglang":
            raise ValueError("min_free_slots_delay is an SGLang setting (engine 'sglang' only)")
        if (
            self.launch is not None
            and self.launch.dtype == "cpu_native"
            and self.engine != "vllm-cpu"
        ):
            raise ValueError(
                "launch.dtype cpu_native is for the CPU build (engine 'vllm-cpu' only)"
            )
        if self.drafter is not None:
            problem = get_engine_kind(self.engine).method_problem(self)
            if problem is not None:
                raise ValueError(f"drafter.method: {problem}")
        if self.is_control:
            if self.attach is not None:
                raise ValueError(
                    "drafter.synthetic needs the engine started by specbench"
                    " (launch): an attached engine's acceptance is not ours to set"
                )
            problem = get_engine_kind(self.engine).synthetic_problem(self)
            if problem is not None:
                raise ValueError(f"drafter.synthetic: {problem}")
        if self.drafter is not None and self.drafter.k_schedule is not None:
            if self.attach is not None:
                raise ValueError(
                    "drafter.k_schedule needs the engine started by specbench"
                    " (launch): an attached engine's k is not ours to set"
                )
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
