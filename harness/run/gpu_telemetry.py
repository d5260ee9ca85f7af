"""GPU telemetry for one invocation of the runner.

NVML is opened once, when the first engine starts, and the manifest says once what is
recorded (`gpu_telemetry`: the driver and every GPU), or that there is no GPU telemetry
and why: a host without NVML runs exactly as before, never with an error. Each engine's
GPUs are its arm's CUDA_VISIBLE_DEVICES, else the harness's own (which the engine
inherits), else all; the engine's manifest entry records them. During every cell
attempt a sampler writes cells/<cell>/gpu.jsonl beside metrics.jsonl.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.engines import get_engine_kind
from harness.measure.gpu import NoTelemetry, Nvml, Selection, open_nvml
from harness.measure.gpu_sampler import GpuSampler
from harness.prereg.schema import Arm
from harness.records import GpuSample
from harness.run.store import RunStore
from harness.rundir.engines import RunGpuTelemetry


@dataclass(frozen=True)
class ArmGpus:
    """The GPUs one engine uses, ready to sample."""

    nvml: Nvml
    selection: Selection

    def sampler(
        self,
        *,
        cell_id: str,
        attempt: int,
        interval_s: float,
        on_sample: Callable[[GpuSample], None],
    ) -> GpuSampler:
        return GpuSampler(
            nvml=self.nvml,
            gpus=self.selection.gpus,
            interval_s=interval_s,
            cell_id=cell_id,
            attempt=attempt,
            on_sample=on_sample,
        )


def arm_cuda_visible(arm: Arm) -> tuple[str | None, str]:
    """The engine's CUDA_VISIBLE_DEVICES and where it comes from."""
    env = get_engine_kind(arm.engine).environment(arm) if arm.launch is not None else {}
    if "CUDA_VISIBLE_DEVICES" in env:
        return env["CUDA_VISIBLE_DEVICES"], f"arm {arm.name}'s CUDA_VISIBLE_DEVICES"
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return os.environ["CUDA_VISIBLE_DEVICES"], "the harness's CUDA_VISIBLE_DEVICES"
    return None, "all GPUs"


class RunTelemetry:
    def __init__(self, store: RunStore) -> None:
        self._store = store
        self._nvml: Nvml | NoTelemetry | None = None

    def _opened(self, note: Callable[[str], None]) -> Nvml | NoTelemetry:
        if self._nvml is None:
            self._nvml = open_nvml()
            if isinstance(self._nvml, NoTelemetry):
                entry: dict[str, Any] = {"recorded": False, "reason": self._nvml.reason}
                note(self._nvml.reason)
            else:
                entry = {"recorded": True, **self._nvml.facts()}
            record = RunGpuTelemetry(**entry)
            self._store.edit_manifest(lambda m: setattr(m, "gpu_telemetry", record))
        return self._nvml

    def for_arm(
        self, arm: Arm, note: Callable[[str], None]
    ) -> tuple[ArmGpus | None, dict[str, Any]]:
        """The arm's GPUs (None: nothing to sample) and what its engine entry records;
        `note` tells the person watching (once for the host, once per arm)."""
        nvml = self._opened(note)
        if isinstance(nvml, NoTelemetry):
            return None, {"recorded": False, "reason": nvml.reason}
        value, source = arm_cuda_visible(arm)
        selection = nvml.select(value, source)
        entry: dict[str, Any] = {"recorded": bool(selection.gpus), **selection.describe()}
        if not selection.gpus:
            entry["reason"] = "no GPU telemetry for this engine: " + "; ".join(
                selection.missing or ["no GPU selected"]
            )
            note(f"arm {arm.name}: {entry['reason']}")
            return None, entry
        if selection.missing:
            note(f"arm {arm.name}: GPU telemetry without {'; '.join(selection.missing)}")
        return ArmGpus(nvml, selection), entry

    def close(self) -> None:
        if isinstance(self._nvml, Nvml):
            self._nvml.close()
        self._nvml = None
