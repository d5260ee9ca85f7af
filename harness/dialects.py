"""The metrics dialects: how an engine spells its /metrics series and its per-request
speculation figures. The one list of them, named here and nowhere else.

An engine kind says which dialect it speaks (`EngineKind.metrics_dialect`, or per arm
`dialect_for`); an attached endpoint names it (`Attach.metrics`). Each dialect's names
live with what reads them: the /metrics series in harness/engines/readout/metrics.py, the
per-request figures in harness/engines/readout/request_spec.py, the drafting rule's facts in
harness/engines/readout/drafting.py; the scripted test engine can speak each one
(harness/testengine). A new engine that speaks an existing dialect changes nothing here.

Standard library only: the prereg schema, the run records and the scripted test engine
all import it.
"""

from __future__ import annotations

from typing import Literal, get_args

Dialect = Literal["vllm", "sglang"]
DIALECTS: tuple[Dialect, ...] = get_args(Dialect)

__all__ = ["DIALECTS", "Dialect"]
