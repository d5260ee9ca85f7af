"""The host's regime as a record: a baseline's plain step by level, and what it says.

Timed in the smoke stage (harness/run/regime.py); judged here, so analysis and the
report read the same sentence: step(B) / step(1) above `recording.regime.max_step_ratio`
calls level B compute-bound, where no drafter can pay whatever it accepts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.errors import InputError
from harness.prereg.schema import Study

REGIME_FILE = "regime.jsonl"


class RegimeLevel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: int
    step_ms: float | None  # median gap per token between chunks (None: nothing timed)
    ratio: float | None  # step_ms / the one-user step_ms
    requests: int  # measured requests with at least two chunks
    # Under recording.host_foreign_cpu_limit: the share of the host's CPU that other
    # processes and the hypervisor took while the level was timed (its last timing), and
    # whether that was above the limit after every try (None: not measured).
    host_busy_share: float | None = None
    host_busy: bool | None = None
    attempts: int = 1


class BaselineRegime(BaseModel):
    """One baseline's plain step by level, and what it says about the host."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["regime"] = "regime"
    arm: str
    key: str  # the arm's smoke key: a resume keeps a record whose key is unchanged
    wall: float
    max_tokens: int
    max_step_ratio: float  # the registered tolerance
    levels: list[RegimeLevel]
    compute_bound_at: list[int]  # levels whose ratio is above the tolerance
    # True: every pass level within the tolerance; False: some level above it;
    # None: nothing to judge (one level, or a level without a step time).
    memory_bound: bool | None
    host_busy_limit: float | None = None  # recording.host_foreign_cpu_limit when timed

    def line(self) -> str:
        """One sentence for the verdict page."""
        busy = [lv for lv in self.levels if lv.host_busy]
        if not busy:
            return self._judgement()
        shares = ", ".join(f"{lv.users} users {lv.host_busy_share:.2f}" for lv in busy)
        return (f"{self._judgement()} (timed while other work took the host's CPU: {shares},"
                f" above the limit {self.host_busy_limit:g} after every try)")

    def _judgement(self) -> str:
        one = next((lv for lv in self.levels if lv.users == 1), None)
        if self.memory_bound is None or one is None or one.step_ms is None:
            timed = ", ".join(f"{lv.users} users {lv.step_ms:.1f} ms" for lv in self.levels
                              if lv.step_ms is not None) or "no step timed"
            return (f"Host regime: not judged for {self.arm} (plain step: {timed}; needs one"
                    " user and a pass level, each timed)")
        if self.memory_bound:
            worst = max((lv for lv in self.levels if lv.users != 1),
                        key=lambda lv: lv.ratio or 0.0)
            return (f"Host regime: memory-bound at the pass levels: {self.arm}'s plain step"
                    f" x{worst.ratio:.2f} at {worst.users} users against one ({one.step_ms:.1f}"
                    f" -> {worst.step_ms:.1f} ms; tolerance x{self.max_step_ratio:g})")
        first = min(self.compute_bound_at)
        at = next(lv for lv in self.levels if lv.users == first)
        return (f"This host is compute-bound at {first} users: step x{at.ratio:.1f}"
                f" ({self.arm}'s plain step {one.step_ms:.1f} -> {at.step_ms:.1f} ms; tolerance"
                f" x{self.max_step_ratio:g}); speculation cannot pay here")


def regime_levels(study: Study) -> list[int]:
    """One user and the pass bar's levels."""
    return sorted({1, *study.bars.pass_.speed.concurrencies})


@dataclass(frozen=True)
class LevelTiming:
    """One level as timed: the median step, the requests it came from, and the host."""

    step_ms: float | None
    requests: int
    host_busy_share: float | None = None
    host_busy: bool | None = None
    attempts: int = 1


def judge(arm: str, key: str, max_tokens: int, tolerance: float,
          steps: dict[int, tuple[float | None, int] | LevelTiming],
          host_busy_limit: float | None = None) -> BaselineRegime:
    """The record from the step times (users -> timing, or (median step in ms, requests))."""
    timed = {u: t if isinstance(t, LevelTiming) else LevelTiming(*t) for u, t in steps.items()}
    one = timed[1].step_ms if 1 in timed else None
    levels = [RegimeLevel(users=u, step_ms=t.step_ms, requests=t.requests,
                          ratio=(t.step_ms / one if t.step_ms is not None and one else None),
                          host_busy_share=t.host_busy_share, host_busy=t.host_busy,
                          attempts=t.attempts)
              for u, t in sorted(timed.items())]
    above = [lv.users for lv in levels if lv.ratio is not None and lv.ratio > tolerance]
    judged = [lv for lv in levels if lv.users != 1]
    memory_bound: bool | None
    if one is None or not judged or any(lv.ratio is None for lv in judged):
        memory_bound = None if not above else False
    else:
        memory_bound = not above
    return BaselineRegime(arm=arm, key=key, wall=time.time(), max_tokens=max_tokens,
                          max_step_ratio=tolerance, levels=levels, compute_bound_at=above,
                          memory_bound=memory_bound, host_busy_limit=host_busy_limit)


def read_regime(path: Path) -> dict[str, BaselineRegime]:
    """smoke/regime.jsonl: the latest record of each baseline (empty when absent)."""
    out: dict[str, BaselineRegime] = {}
    if not path.exists():
        return out
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = BaselineRegime.model_validate_json(line)
        except ValidationError as err:
            first = err.errors()[0]
            loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise InputError(f"{path}: line {n}: field {loc}: {first['msg']}") from None
        out[rec.arm] = rec
    return out


def regime_lines(records: dict[str, BaselineRegime] | list[BaselineRegime]) -> list[str]:
    """The verdict page's lines, one per baseline, in the order measured."""
    recs = list(records.values()) if isinstance(records, dict) else list(records)
    return [r.line() for r in recs]


def host_regime(manifest: dict) -> list[dict]:
    """verdict.json's `host_regime`: per baseline, the judgement and its sentence."""
    out = []
    for raw in (manifest.get("regime") or {}).values():
        rec = BaselineRegime.model_validate(raw)
        out.append({"arm": rec.arm, "memory_bound": rec.memory_bound,
                    "compute_bound_at": rec.compute_bound_at,
                    "max_step_ratio": rec.max_step_ratio,
                    "steps_ms": {str(lv.users): lv.step_ms for lv in rec.levels},
                    "line": rec.line()})
    return out
