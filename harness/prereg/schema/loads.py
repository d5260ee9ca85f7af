"""The loads: closed-loop concurrency levels and the open-loop arrival rates."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.prereg.schema.base import Name, Positive, PositiveInt, Strict


class RequestCount(Strict):
    """Measured requests per closed-loop cell: max(min, per_user x concurrency)."""

    min: PositiveInt = Field(64, description="The fewest measured requests a cell sends.")
    per_user: PositiveInt = Field(
        8, description="Measured requests per user (per unit of concurrency)."
    )

    def for_concurrency(self, concurrency: int) -> int:
        return max(self.min, self.per_user * concurrency)


class ClosedLoopSpec(Strict):
    """Closed loop: N users, each sending its next request when its last one ends."""

    concurrency: list[PositiveInt] = Field(
        description="The concurrency levels (users), distinct, in increasing order; cells"
        " run low concurrency first."
    )
    requests: RequestCount = Field(
        default_factory=RequestCount, description="Measured requests per cell."
    )
    warmup_per_user: Annotated[int, Field(ge=0)] = Field(
        1, description="Unmeasured warm-up requests per user before a cell's measured ones."
    )
    # Users whose requests all have one length otherwise end on one engine step, every
    # round, in lockstep (N sends at once: a turnaround the client cannot meet at 32
    # users, and a load no deployment sees).
    stagger_warmup: bool = Field(
        False,
        description="Cut the users' first warm-up requests to 1/N, 2/N, ... N/N of"
        " max_tokens, so the users leave lockstep before anything is"
        " measured (harness/measure/patterns.py).",
    )
    max_duration_s: Positive | None = Field(
        None,
        description="A cap in seconds on a speed cell's wall clock: after it users"
        " send no further request. null: no cap.",
    )

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

    metric: Literal["ttft", "tpot", "latency"] = Field(
        "ttft",
        description="What is timed per request: time to first token, time per"
        " output token after the first, or the whole request.",
    )
    percentile: Annotated[float, Field(gt=0, lt=100)] = Field(
        99.0,
        description="The percentile of `metric` over a cell's measured requests (a"
        " failed request counts as infinitely slow).",
    )
    max_s: Positive = Field(
        2.0, description="A rate is sustained when that percentile is at most this many seconds."
    )


class OpenLoopSpec(Strict):
    """Open loop (stage 3): requests arrive on a schedule, whatever the engine's pace, at
    rates set from the knee, for the fleet figure (GPUs a stated traffic needs)."""

    task: Name = Field(description="The task whose prompts the arrivals draw.")
    rates_relative_to_knee: list[Positive] = Field(
        description="The offered rates, each a multiple of the reference rate: the"
        " baseline's request throughput at the engine group's knee level (the"
        " smallest knee among its drafters, the highest measured level when"
        " none is located). One cell per arm and rate."
    )
    arrival: Literal["poisson", "gamma"] = Field(
        "poisson", description="The inter-arrival distribution."
    )
    burstiness: Positive = Field(
        1.0,
        description="The gamma distribution's shape (below 1: burstier); 1.0 is"
        " Poisson. Read for `gamma` only.",
    )
    seed: int = Field(0, description="Seeds the arrival times.")
    duration_s: Positive | None = Field(
        None,
        description="Seconds of arrivals per cell; give this, `requests`, or both (a"
        " cell ends at the first reached).",
    )
    requests: PositiveInt | None = Field(None, description="Measured requests per cell.")
    warmup: Annotated[int, Field(ge=0)] = Field(
        0, description="Unmeasured requests sent first in each cell."
    )
    objective: LatencyObjective = Field(
        default_factory=LatencyObjective, description="What sustaining a rate means."
    )
    fleet_traffic_rps: Positive = Field(
        100.0,
        description="The stated traffic in requests/s that the fleet figure gives the"
        " GPU count for (ceil(traffic / the highest sustained rate)).",
    )

    @model_validator(mode="after")
    def _bounded(self) -> OpenLoopSpec:
        if self.duration_s is None and self.requests is None:
            raise ValueError("give duration_s or requests, so each open-loop cell ends")
        if not self.rates_relative_to_knee:
            raise ValueError("expected at least one rate")
        return self


class Loads(Strict):
    """The loads every arm is measured under."""

    closed_loop: ClosedLoopSpec = Field(
        description="The closed-loop levels every speed task is measured at."
    )
    open_loop: OpenLoopSpec | None = Field(None, description="The open-loop stage; null: not run.")
