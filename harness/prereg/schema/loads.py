"""The loads: closed-loop concurrency levels and the open-loop arrival rates."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.prereg.schema.base import Name, Positive, PositiveInt, Strict


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
