"""One doctor check's outcome, printed as one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warn", "FAIL", "skip"]


@dataclass
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None  # for a FAIL (or warn): what to do about it

    @property
    def blocker(self) -> bool:
        return self.status == "FAIL"

    def line(self) -> str:
        text = f"{self.status:<5} {self.name}: {self.detail}"
        return text + (f" -> fix: {self.fix}" if self.fix else "")
