"""The tasks a study sends, where their data comes from, and how requests sample."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.prereg.schema.base import Name, PositiveInt, Strict, TaskUse
from harness.workloads.kinds import SCORED_KINDS, TaskKind


class HubSource(Strict):
    """Load the task from a hub dataset instead of the vendored copy (needs network)."""

    dataset: str = Field(description="The hub dataset id (e.g. `openai/gsm8k`).")
    revision: str = Field(description="The dataset commit it is read at.")
    config: str | None = Field(
        None,
        description="The dataset's configuration (e.g. `main` for openai/gsm8k); null:"
        " the kind's own (its task.yaml) for the kind's dataset, else the"
        " dataset's default.",
    )
    split: str | None = Field(
        None, description="The split read; null: the kind's own, else `test`."
    )
    # Filled from a speed_bench task's own fields (TaskSpec below).
    categories: list[str] | None = Field(
        None,
        description="speed_bench: the categories kept, in the dataset's order (null: every one).",
    )
    placeholders: Literal["refuse", "drop"] | None = Field(
        None,
        description="speed_bench: what is done with placeholder rows (TaskSpec's `placeholders`).",
    )


# SPEED-Bench (nvidia/SPEED-Bench): its configurations, from its dataset card.
SPEED_BENCH_DATASET = "nvidia/SPEED-Bench"
SpeedBenchConfig = Literal[
    "qualitative",
    "throughput_1k",
    "throughput_2k",
    "throughput_8k",
    "throughput_16k",
    "throughput_32k",
]
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class TaskSpec(Strict):
    """A task: a data set of prompts, what it is used for, and how much each answer may be."""

    name: Name = Field(description="The task's name, unique in the study; cell ids carry it.")
    kind: TaskKind = Field(
        description="Which data set and scorer (workloads/<kind>/): chat"
        " (MT-Bench), gsm8k, humaneval, mmlu, speed_bench."
    )
    uses: list[TaskUse] = Field(
        description="What it is measured for, each once: `speed` (closed-loop cells at every"
        " level), `accuracy` (scored cells; scored kinds only), `identity`"
        " (greedy outputs compared with the baseline's)."
    )
    max_tokens: PositiveInt = Field(description="The most output tokens a request asks for.")
    source: HubSource | None = Field(
        None,
        description="Read from a hub dataset instead; null: the vendored,"
        " sha256-checked copy. A speed_bench task's is filled from its"
        " own fields.",
    )
    subset: PositiveInt | None = Field(
        None, description="A seeded sample of this many items (small studies); null: every item."
    )
    subset_seed: int = Field(0, description="Seeds that sample.")
    identity_items: PositiveInt = Field(
        32, description="Identity cells compare this many prompts (the first in the task's order)."
    )
    turns: Literal["first", "all"] = Field(
        "first",
        description="`first`: each item's first turn only. `all`: a multi-turn item"
        " (MT-Bench's two turns, SPEED-Bench's multi-turn rows) is one"
        " user session, each later turn sent once the answer before it"
        " arrives, with that answer in its messages; every turn a"
        " request. `all` is for chat and speed_bench only.",
    )
    # The three fill `source`, which the loaders read (harness/workloads/speed_bench.py).
    config: SpeedBenchConfig | None = Field(
        None, description="speed_bench only (required there): the dataset's configuration."
    )
    categories: list[str] | None = Field(
        None, description="speed_bench only: the categories kept, distinct (null: all)."
    )
    revision: str | None = Field(
        None,
        description="speed_bench only (required there): the 40-hex nvidia/SPEED-Bench"
        " commit it is read at, from the hub cache (`specbench fetch` puts"
        " it there).",
    )
    placeholders: Literal["refuse", "drop"] | None = Field(
        None,
        description="speed_bench only: rows the hub publishes as a placeholder sentence"
        " are never sent. `refuse` (null: the default) refuses the study;"
        " `drop` measures the rest, the dropped counted by category in the"
        " manifest and on the report.",
    )

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
            raise ValueError(
                f"turns: all is for multi-turn tasks (chat, speed_bench); a"
                f" {self.kind} item has one turn"
            )
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
        own = {
            "config": self.config,
            "categories": self.categories,
            "revision": self.revision,
            "placeholders": self.placeholders,
        }
        if self.kind != "speed_bench":
            given = [k for k, v in own.items() if v is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: only a speed_bench task takes these")
            return self
        if self.config is None or self.revision is None:
            raise ValueError(
                "a speed_bench task needs config (e.g. qualitative) and revision"
                f" (the {SPEED_BENCH_DATASET} commit it is read at)"
            )
        if not _COMMIT.match(self.revision):
            raise ValueError(
                f"revision {self.revision!r}: expected a 40-hex commit sha of"
                f" {SPEED_BENCH_DATASET} (a branch moves)"
            )
        source = HubSource(
            dataset=SPEED_BENCH_DATASET,
            revision=self.revision,
            config=self.config,
            split="test",
            categories=self.categories,
            placeholders=self.placeholders,
        )
        if self.source is not None and self.source != source:
            raise ValueError(
                "a speed_bench task names its data by config, categories and"
                " revision, not by source"
            )
        # Frozen model: set once here, so every loader reads the task through `source`.
        object.__setattr__(self, "source", source)
        return self


class Sampling(Strict):
    """How every request samples (sent in each request's body)."""

    temperature: Annotated[float, Field(ge=0)] = Field(0.0, description="0: greedy.")
    top_p: Annotated[float, Field(gt=0, le=1)] = Field(
        1.0, description="Nucleus sampling's mass; 1: off."
    )
    seed: int = Field(0, description="Each request's seed, and the engine's (--seed).")
    ignore_eos: bool = Field(False, description="Decode to max_tokens past end of sequence.")
