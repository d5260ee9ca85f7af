"""The tasks a study sends, where their data comes from, and how requests sample."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.prereg.schema.base import Name, PositiveInt, Strict, TaskUse
from harness.workloads.kinds import SCORED_KINDS, TaskKind


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
