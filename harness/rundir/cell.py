"""A cell of the plan, typed, and the one grammar of its id and folder name.

The planner (harness.plan) builds `Cell`s from the study; the run stack measures them
and writes each into its cell.json (`CellFile.cell`); analysis reads them back. A cell's
id is computed from its fields by the grammar functions here, never stored as a source
of truth: cell.json keeps it for people and old readers, and a stored id that is not
the one its fields give is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import IntEnum
from functools import cached_property
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    computed_field,
    model_validator,
)

CellKind = Literal["speed", "identity", "accuracy", "open"]


class Stage(IntEnum):
    """The plan's stages, in run order (harness.plan); cell.json stores the number."""

    STOP = 1  # identity cells and the stop bar's speed levels, judged before the rest
    REST = 2  # the remaining speed levels (skipped if stop fires) and accuracy cells
    OPEN_LOOP = 3  # open-loop cells at rates relative to each arm's knee
    SURFACE = 4  # the round-cost surface (`surface:`), after the registered stages
    SCHEDULE = 5  # the k schedule the surface proposed, verified at every level


# A check-bar rerun's id: `<id>/rerun<n>` (rerun_id), its folder `<folder>__rerun<n>`.
RERUN = re.compile(r"^(?P<original>.+)/rerun(?P<n>\d+)$")
RERUN_DIR = re.compile(r"^(?P<original>.+)__rerun(?P<n>\d+)$")
SESSION_SUFFIX = re.compile(r"/s(?P<s>\d+)$")


def speed_cell_id(arm: str, task: str, concurrency: int | None, session: int | None = None) -> str:
    """A closed-loop speed cell: `<arm>/<task>/speed/c<NNN>`, in session s `.../s<s>`."""
    if concurrency is None:
        raise ValueError(f"a speed cell of {arm}/{task} without a concurrency")
    return session_id(f"{arm}/{task}/speed/c{concurrency:03d}", session)


def task_cell_id(arm: str, task: str, kind: Literal["identity", "accuracy"]) -> str:
    """A cell measured once per arm and task: `<arm>/<task>/identity` or `.../accuracy`."""
    return f"{arm}/{task}/{kind}"


def open_cell_id(arm: str, task: str, rate_relative: float | None) -> str:
    """An open-loop cell at a multiple of the knee's throughput: `<arm>/<task>/open/x<rate>`."""
    if rate_relative is None:
        raise ValueError(f"an open-loop cell of {arm}/{task} without a rate")
    return f"{arm}/{task}/open/x{rate_relative:g}"


def session_id(cell_id: str, session: int | None) -> str:
    """Session 1 (or a cell measured once) keeps the plain id; session s is `<id>/s<s>`."""
    return cell_id if session is None or session == 1 else f"{cell_id}/s{session}"


def rerun_id(cell_id: str, rerun: int) -> str:
    """The check bar's n-th rerun of a cell: `<id>/rerun<n>`."""
    return f"{cell_id}/rerun{rerun}"


def cell_dirname(cell_id: str) -> str:
    return cell_id.replace("/", "__")


def rerun_of(cell_id: str) -> str | None:
    """The cell a rerun id measures again (None: not a rerun)."""
    m = RERUN.match(cell_id)
    return m.group("original") if m else None


class Cell(BaseModel):
    """One cell of the plan: an arm measured at one task and load, in one engine session.
    cell.json also holds its `id`, computed from these fields (a stored id they do not
    give is refused)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: Stage  # the plan's stage: 1 STOP, 2 REST, 3 OPEN_LOOP, 4 SURFACE, 5 SCHEDULE
    arm: str
    task: str
    kind: CellKind
    concurrency: int | None  # closed loop; None for open loop
    requests: int | None  # measured requests; None when set by duration at run time
    warmup: int
    rate_relative: float | None = None  # open loop: multiple of the knee's throughput
    # The engine session it is measured in: repeated sessions 1..N (None: the cell is
    # measured once). What starts engines reads this one.
    session: int | None = None
    rerun: int = 0  # the check bar's n-th rerun of the planned cell (0: the planned cell)
    # A rerun is measured in a fresh session of its own, numbered after the registered
    # ones (N + s, in `session`), yet it measures again the cell of session s, which its
    # id names: the two are kept apart so the id follows from the fields.
    rerun_of_session: int | None = None

    @model_validator(mode="after")
    def _fields_agree(self) -> Cell:
        if not self.rerun and self.rerun_of_session is not None:
            raise ValueError("rerun_of_session is set on a cell that is not a rerun")
        if self.rerun and (self.session is None) != (self.rerun_of_session is None):
            raise ValueError("a rerun of a session's cell needs both session and rerun_of_session")
        _ = self.id  # computing it refuses a speed cell without a level, an open one without a rate
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _stored_id_is_computed(cls, data: Any, handler: ModelWrapValidatorHandler[Cell]) -> Cell:
        """cell.json stores the id beside the fields (every format); it must be the one
        the fields give. A rerun written before `rerun` was a field (format 5 and older)
        is read from its id: `<id>/rerun<n>`, the session its id names, `session` N + s."""
        if not isinstance(data, dict) or "id" not in data:
            return handler(data)
        data = dict(data)
        stored = data.pop("id")
        if "rerun" not in data and isinstance(stored, str) and (m := RERUN.match(stored)):
            data["rerun"] = int(m.group("n"))
            s = SESSION_SUFFIX.search(m.group("original"))
            data["rerun_of_session"] = (
                int(s.group("s")) if s else 1 if data.get("session") is not None else None
            )
        cell = handler(data)
        if stored != cell.id:
            raise ValueError(f"stored id {stored!r} is not the cell's id {cell.id!r}")
        return cell

    # Cached: read in every loop over a run's cells; the model is frozen, so only a copy
    # with other fields (model_copy below) could make it stale.
    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def id(self) -> str:
        session = self.rerun_of_session if self.rerun else self.session
        if self.kind == "speed":
            planned = speed_cell_id(self.arm, self.task, self.concurrency, session)
        elif self.kind == "open":
            planned = open_cell_id(self.arm, self.task, self.rate_relative)
        else:
            planned = task_cell_id(self.arm, self.task, self.kind)
        return rerun_id(planned, self.rerun) if self.rerun else planned

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Cell:
        """A copy; with `update`, its id computed again from its own fields (the cached
        one is the original's)."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            copied.__dict__.pop("id", None)
        return copied

    @property
    def dirname(self) -> str:
        return cell_dirname(self.id)

    @property
    def load_label(self) -> str:
        if self.kind == "open":
            return f"open x{self.rate_relative:g} knee"
        return f"closed c={self.concurrency}"

    def rerun_cell(self, registered_sessions: int, rerun: int = 1) -> Cell:
        """The check bar's rerun of this planned cell: a fresh engine session of its own,
        numbered after the `registered_sessions` (session s as N + s)."""
        session = None if self.session is None else registered_sessions + self.session
        return self.model_copy(
            update={"rerun": rerun, "session": session, "rerun_of_session": self.session}
        )

    def planned(self) -> Cell:
        """The planned cell a rerun measures again (itself for a planned cell)."""
        if not self.rerun:
            return self
        update = {"rerun": 0, "session": self.rerun_of_session, "rerun_of_session": None}
        return self.model_copy(update=update)
