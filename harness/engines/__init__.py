"""Engine kinds behind one small interface, and the registry that names them.

A new engine is one module with an EngineKind subclass plus one entry below.
"""

from __future__ import annotations

from harness.engines.launch.base import EngineKind
from harness.engines.launch.scripted import ScriptedKind
from harness.engines.launch.sglang_engine import SglangKind
from harness.engines.launch.vllm_engine import VllmCpuKind, VllmKind
from harness.errors import SpecbenchError

ENGINE_KINDS: dict[str, EngineKind] = {
    "vllm": VllmKind(),
    "vllm-cpu": VllmCpuKind(),
    "sglang": SglangKind(),
    "scripted": ScriptedKind(),
}


def get_engine_kind(name: str) -> EngineKind:
    try:
        return ENGINE_KINDS[name]
    except KeyError:
        known = ", ".join(sorted(ENGINE_KINDS))
        raise SpecbenchError(f"unknown engine kind {name!r} (known: {known})") from None


__all__ = ["ENGINE_KINDS", "EngineKind", "get_engine_kind"]
