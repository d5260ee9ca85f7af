"""The declared model a scripted test engine follows: timing, speculation, chunking, failures.

A study can use it as an arm (`Arm.scripted`) for dry runs, and the fidelity benchmark
uses it as ground truth. Everything is explicit so a run is reproducible from the spec.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.dialects import Dialect
from harness.errors import InputError

# The repeated session an engine start belongs to (harness.engines.running.lifecycle sets it):
# the scripted engine's per-session speed factor is drawn for that number.
ENGINE_SESSION_VARIABLE = "SPECBENCH_ENGINE_SESSION"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FailureInjection(StrictModel):
    """Make some requests fail in one way, so the client's error paths can be exercised.

    A request is hit when its arrival number (1-based, over the engine's life) is a
    multiple of `every_nth`, or with `probability` (seeded), or when it is in `requests`.
    """

    mode: Literal["refuse", "stall", "drop", "malformed", "die"] = Field(
        description="How a hit request fails: `refuse` answers an HTTP error status;"
        " mid-stream, `stall` goes silent for stall_s, then the connection"
        " closes; `drop` closes the connection; `malformed` sends a chunk that is"
        " not JSON, and the stream goes on; `die` ends it and the engine with"
        " it."
    )
    every_nth: int | None = Field(
        default=None,
        ge=1,
        description="Hit every request whose arrival number is a"
        " multiple of this; null: none by number.",
    )
    probability: float = Field(
        default=0.0, ge=0.0, le=1.0, description="Hit each request with this chance (seeded)."
    )
    requests: list[int] = Field(
        default_factory=list, description="Hit these arrival numbers (1-based)."
    )
    after_tokens: int = Field(
        default=4, ge=0, description="Mid-stream modes act after this many output tokens were sent."
    )
    stall_s: float = Field(
        default=3600.0, gt=0, description="stall: seconds the stream goes silent."
    )
    status: int = Field(default=503, ge=400, le=599, description="refuse: the HTTP status.")


class ScriptedEngineSpec(StrictModel):
    """Per-step time is a roofline over the batch; drafts are accepted per position.

    step_s = step_overhead_s + max(weight_bytes / bandwidth_bytes_per_s,
                                   (flops_per_token * tokens_in_step
                                    + prefill_flops_per_token * prompt_tokens) / flops_per_s)
    where tokens_in_step counts k+1 verified positions per decoding request (1 without a
    drafter) and prompt_tokens those of requests admitted in that step (their prefill).
    """

    metrics_dialect: Dialect = Field(
        "vllm", description="Which engine's /metrics names and response fields it imitates."
    )
    served_model: str = Field("scripted", description="The model name it serves.")
    weight_bytes: float = Field(
        default=1.6e10, gt=0, description="Bytes a step reads (the roofline's memory term)."
    )
    bandwidth_bytes_per_s: float = Field(
        default=2.0e12, gt=0, description="Memory bandwidth, bytes/s."
    )
    flops_per_token: float = Field(
        default=1.6e10, gt=0, description="FLOPs per verified position in a step."
    )
    flops_per_s: float = Field(default=4.0e14, gt=0, description="Compute rate, FLOP/s.")
    # A small value leaves decode steps compute-bound while admissions cost nothing extra:
    # a round's cost set by k and load alone (the round-cost surface's tests).
    prefill_flops_per_token: float | None = Field(
        default=None,
        ge=0,
        description="A prompt token's FLOPs in the step that admits it; null: flops_per_token.",
    )
    step_overhead_s: float = Field(default=0.0, ge=0, description="Seconds added to every step.")
    num_draft_tokens: int = Field(
        default=0, ge=0, description="k: draft tokens per step; 0: no drafter."
    )
    accept_probs: list[float] | None = Field(
        None,
        description="k entries: accept_probs[i] is the chance position i is kept given"
        " every earlier position was (so vLLM's per-position rate is their"
        " product).",
    )
    accept_draws: Literal["random", "even"] = Field(
        "random",
        description="`random`: each round draws its accepts (seeded). `even`: each"
        " request keeps position i in exactly its declared share of"
        " rounds, spread evenly (error diffusion), so a declared 2.5"
        " tokens a round is 2.5 over every whole cycle of rounds.",
    )
    k_schedule: list[tuple[int, int | None, int]] | None = Field(
        None,
        description="Draft tokens by running batch size, as vLLM's"
        " num_speculative_tokens_per_batch_size: inclusive (first, last, k)"
        " ranges from batch 1, the last open (null); a step drafts the k of"
        " the batch it runs (k = 0: a plain step), at most"
        " num_draft_tokens.",
    )
    max_batch: int = Field(
        default=256,
        ge=1,
        description="Requests running at once; more wait (an arm's max_running_requests sets it).",
    )
    kv_capacity_tokens: int = Field(
        default=1_000_000,
        ge=1,
        description="KV cache size in tokens: the cache usage gauge's denominator.",
    )
    chunking: Literal["per_step", "per_token", "per_request"] = Field(
        "per_step",
        description="`per_step`: one chunk per step with all its tokens (what"
        " vLLM sends); `per_token`: one chunk per token, all sent at"
        " the step's end; `per_request`: the whole output in one"
        " chunk as the request ends, so first token and end share a"
        " stamp (what a client that falls a whole request behind"
        " sees).",
    )
    flush_every_steps: int = Field(
        default=1,
        ge=1,
        description="Hold a stream's chunks and write them together every N"
        " steps (and at its end): a server that flushes several"
        " steps at once, so they arrive under one stamp.",
    )
    flush_from_token: int = Field(
        default=1,
        ge=1,
        description="The output token (1-based) whose step starts that"
        " holding (1: the first). 2 leaves the first token alone"
        " and pairs steps mid-stream: an API server that stalled"
        " and then wrote the steps waiting back to back.",
    )
    continuous_usage: bool = Field(
        True,
        description="Honour `stream_options.continuous_usage_stats` (cumulative usage"
        " on every chunk).",
    )
    per_request_spec_metrics: bool = Field(
        True,
        description="Per-request speculation figures on the final chunk (vLLM"
        " `metrics.speculative_decoding`, SGLang"
        " `sglext.spec_tokens_details` when the request asks).",
    )
    omit_series: list[str] = Field(
        default_factory=list,
        description="Series /metrics leaves out, by name (e.g."
        " `sglang:spec_verify_calls_total`, which SGLang releases before PR 25689"
        " lack): an engine release without them.",
    )
    eos_probability: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Chance, per generated token, that it is EOS"
        " (ignored when the request sets"
        " ignore_eos).",
    )
    seed: int = Field(0, description="Seeds every draw (acceptance, EOS, failures).")
    failures: list[FailureInjection] = Field(
        default_factory=list, description="Requests made to fail."
    )
    # Faults of a whole arm, for the smoke stage's tests.
    frozen_spec_counters: bool = Field(
        False,
        description="The speculation series are exported but never move (an engine"
        " that drafts nothing).",
    )
    output_salt: int = Field(
        0,
        description="Mixed into every prompt's text, so an arm whose salt differs from its"
        " baseline's answers other words (a drafter that changes greedy"
        " output).",
    )
    # The scripted model's scores, served when a request asks for logprobs: each output
    # position has a top-1 word (the text's) and a runner-up. A near-tie is a property of
    # the model, so a test sets it on the baseline and the drafter arm alike.
    logprob_margin: float = Field(
        default=5.0,
        gt=0,
        description="The target's logprob(top-1) - logprob(runner-up), in"
        " nats, everywhere but tie_at_token.",
    )
    tie_at_token: int | None = Field(
        default=None,
        ge=1,
        description="The output position (1-based) whose margin is tie_margin: a near-tie.",
    )
    tie_margin: float = Field(default=0.01, ge=0, description="The margin at tie_at_token.")
    flip_at_token: int | None = Field(
        default=None,
        ge=1,
        description="This arm emits the runner-up at that output"
        " position (1-based; later words unchanged). At"
        " tie_at_token it is a numerics flip: it reports its"
        " own ranking (the emitted word first, margin"
        " tie_margin). Elsewhere it is a real bug: it reports"
        " the target's ranking unchanged, and the emitted"
        " token's logprob is the runner-up's.",
    )
    split_char_at_token: int | None = Field(
        default=None,
        ge=1,
        description="Output token N (1-based) is the first two bytes of a"
        " three-byte character and N + 1 its last byte"
        " (harness/testengine/tokens.py): a step can end"
        " inside a character.",
    )
    # The bench's day-to-day variation, declared and reproducible.
    speed_factor: float = Field(
        default=1.0, gt=0, description="Every step takes step_s / speed_factor."
    )
    session_speed_spread: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Per engine session (a fresh start in a run's repeated sessions) the"
        " factor is further multiplied by one drawn uniformly from [1 - spread,"
        " 1 + spread], seeded by session_speed_seed and the session's number. 0:"
        " every session alike.",
    )
    session_speed_seed: int = Field(0, description="Seeds the session factors.")

    @model_validator(mode="after")
    def _drafts_match_probs(self) -> ScriptedEngineSpec:
        probs = self.accept_probs or []
        if self.num_draft_tokens and len(probs) != self.num_draft_tokens:
            raise ValueError(
                f"accept_probs needs {self.num_draft_tokens} entries (one per draft "
                f"position), got {len(probs)}"
            )
        if not self.num_draft_tokens and probs:
            raise ValueError("accept_probs given but num_draft_tokens is 0")
        if any(not 0.0 <= p <= 1.0 for p in probs):
            raise ValueError("accept_probs entries must lie in [0, 1]")
        if self.k_schedule is not None:
            if not self.num_draft_tokens:
                raise ValueError("k_schedule given but num_draft_tokens is 0")
            if any(k > self.num_draft_tokens or k < 0 for _, _, k in self.k_schedule):
                raise ValueError(
                    f"k_schedule's k must lie in [0, {self.num_draft_tokens}] (num_draft_tokens)"
                )
        from harness.testengine.metrics_text import exported_series

        known = exported_series(self.metrics_dialect)
        for name in self.omit_series:
            if name not in known:
                raise ValueError(
                    f"omit_series: {name!r} is not a series the scripted engine"
                    f" exports in the {self.metrics_dialect} dialect (one of:"
                    f" {', '.join(known)})"
                )
        return self

    def step_seconds(self, tokens_in_step: int, prefill_tokens: int = 0) -> float:
        """A step verifying `tokens_in_step` decode positions and admitting
        `prefill_tokens` prompt tokens."""
        memory_s = self.weight_bytes / self.bandwidth_bytes_per_s
        prefill = (
            self.flops_per_token
            if self.prefill_flops_per_token is None
            else self.prefill_flops_per_token
        )
        compute_s = (
            self.flops_per_token * tokens_in_step + prefill * prefill_tokens
        ) / self.flops_per_s
        return (self.step_overhead_s + max(memory_s, compute_s)) / self.speed_factor

    def k_at(self, batch: int) -> int:
        """The draft tokens of a step that runs `batch` requests."""
        if self.k_schedule is None:
            return self.num_draft_tokens
        for first, last, k in self.k_schedule:
            if first <= batch and (last is None or batch <= last):
                return k
        return self.k_schedule[-1][2]  # past a closed last range: carried forward, as vLLM

    def session_speed_factor(self, session: int) -> float:
        """The declared speed factor of engine session `session` (1-based)."""
        if self.session_speed_spread == 0:
            return 1.0
        draw = random.Random(f"{self.session_speed_seed}/{session}").uniform(-1.0, 1.0)
        return 1.0 + self.session_speed_spread * draw

    def for_session(self, session: int) -> ScriptedEngineSpec:
        """This spec as engine session `session` runs it (its factor applied)."""
        factor = self.session_speed_factor(session)
        return self.model_copy(update={"speed_factor": self.speed_factor * factor})

    def position_rates(self) -> list[float]:
        """Unconditional chance of keeping at least i+1 drafts (vLLM's per-position rate)."""
        rates, keep = [], 1.0
        for p in self.accept_probs or []:
            keep *= p
            rates.append(keep)
        return rates

    def expected_acceptance_length(self) -> float:
        """Tokens per verification step: 1 + sum of the per-position rates."""
        return 1.0 + sum(self.position_rates())


def load_spec(path: str | Path) -> ScriptedEngineSpec:
    """Read a spec file (JSON or YAML); bad input is a one-line InputError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise InputError(f"{path}: cannot read scripted engine spec ({err.strerror})") from err
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except (ValueError, Exception) as err:  # yaml.YAMLError and json errors alike
        raise InputError(f"{path}: not valid {path.suffix.lstrip('.') or 'JSON'}: {err}") from err
    try:
        return ScriptedEngineSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InputError(f"{path}: field {where}: {first['msg']}") from err
