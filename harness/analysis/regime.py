"""The host's regime as a record: a baseline's plain step by level, and what it says.

Timed in the smoke stage (harness/run/regime.py); judged here, so analysis and the
report read the same sentence: step(B) / step(1) above `recording.regime.max_step_ratio`
calls level B compute-bound, where no drafter can pay whatever it accepts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from harness.errors import InputError
from harness.prereg.schema import Study
from harness.rundir.manifest import Manifest
from harness.rundir.regime import BaselineRegime, RegimeLevel

REGIME_FILE = "regime.jsonl"


def regime_levels(study: Study) -> list[int]:
    """One and two users, and the pass bar's levels. Two users even where the bar reads one
    alone: a plain step at two rows that costs two at one is compute-bound from the first
    row, so a round of k + 1 positions at one user costs k + 1 steps (an AVX2 CPU serving
    bfloat16 without native matmuls)."""
    return sorted({1, 2, *study.bars.pass_.speed.concurrencies})


@dataclass(frozen=True)
class LevelTiming:
    """One level as timed: the median step, the requests it came from, and the host."""

    step_ms: float | None
    requests: int
    host_busy_share: float | None = None
    host_busy: bool | None = None
    attempts: int = 1


def judge(
    arm: str,
    key: str,
    max_tokens: int,
    tolerance: float,
    steps: Mapping[int, tuple[float | None, int] | LevelTiming],
    host_busy_limit: float | None = None,
) -> BaselineRegime:
    """The record from the step times (users -> timing, or (median step in ms, requests))."""
    timed = {u: t if isinstance(t, LevelTiming) else LevelTiming(*t) for u, t in steps.items()}
    one = timed[1].step_ms if 1 in timed else None
    levels = [
        RegimeLevel(
            users=u,
            step_ms=t.step_ms,
            requests=t.requests,
            ratio=(t.step_ms / one if t.step_ms is not None and one else None),
            host_busy_share=t.host_busy_share,
            host_busy=t.host_busy,
            attempts=t.attempts,
        )
        for u, t in sorted(timed.items())
    ]
    above = [lv.users for lv in levels if lv.ratio is not None and lv.ratio > tolerance]
    judged = [lv for lv in levels if lv.users != 1]
    memory_bound: bool | None
    if one is None or not judged or any(lv.ratio is None for lv in judged):
        memory_bound = None if not above else False
    else:
        memory_bound = not above
    return BaselineRegime(
        arm=arm,
        key=key,
        wall=time.time(),
        max_tokens=max_tokens,
        max_step_ratio=tolerance,
        levels=levels,
        compute_bound_at=above,
        memory_bound=memory_bound,
        host_busy_limit=host_busy_limit,
    )


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


def host_regime(manifest: Manifest) -> list[dict]:
    """verdict.json's `host_regime`: per baseline, the judgement and its sentence."""
    out = []
    for rec in manifest.regime.values():
        out.append(
            {
                "arm": rec.arm,
                "memory_bound": rec.memory_bound,
                "compute_bound_at": rec.compute_bound_at,
                "max_step_ratio": rec.max_step_ratio,
                "steps_ms": {str(lv.users): lv.step_ms for lv in rec.levels},
                "line": rec.line(),
            }
        )
    return out
