"""What measuring a cell reads of a running engine, whatever its kind.

`ServingEngine` names it: where the engine serves and is scraped, the model it answers
as, its metrics dialect, whether it is alive, and its process group (whose CPU time is
the engine's, not foreign). `EngineProcess` (engine_process.py), the one handle that
launches or attaches to every kind (vLLM, SGLang, the scripted test engine), satisfies it
structurally; the measuring code (harness/run/execute.py, harness/measure/host_cpu.py)
types against it without importing the process handle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from harness.dialects import Dialect


class ServingEngine(Protocol):
    """A running engine as a cell measures it."""

    @property
    def base_url(self) -> str: ...

    @property
    def metrics_url(self) -> str: ...

    @property
    def served_model(self) -> str: ...

    @property
    def metrics_dialect(self) -> Dialect: ...

    @property
    def pgid(self) -> int | None:
        """The process group the engine's processes share (it leads its own session);
        None for an attached endpoint, whose processes are not known."""
        ...

    def alive(self) -> bool: ...
