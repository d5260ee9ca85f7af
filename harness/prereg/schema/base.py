"""What every part of the registration shares: the strict model base and the
constrained field types (names, engine names, positive numbers)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from harness.engines import ENGINE_KINDS

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
