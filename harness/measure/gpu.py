"""GPU telemetry through NVML (the `nvidia-ml-py` binding, imported as `pynvml`): the one
place that knows NVML's calls, units and clock-event bits.

`open_nvml()` never raises: a host without the binding, the library, a driver or a GPU
gets a `NoTelemetry` with the reason, and a run goes on without GPU telemetry. Once
open, `Nvml.select(cuda_visible)` finds the GPUs an engine uses (its
CUDA_VISIBLE_DEVICES, else all) and `Nvml.read(gpu)` takes one reading: a dict with the
fields of harness.records.GpuReading. A reading never raises for NVML trouble: a figure
the GPU does not support is None, any other NVML error makes the reading a gap that
says why. NVML is thread-safe, so the sampler reads from a thread of its own
(harness.measure.gpu_sampler). This module needs only the standard library and the
binding, so benchmarks/gpu_telemetry_check.py runs on a GPU host that has nothing else.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass, field
from typing import Any

# nvml.h's nvmlClocksEventReason* bits, which keep the values of the older
# nvmlClocksThrottleReason* names; kept here because a binding of either age may
# lack one of the two spellings.
CLOCK_EVENT_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}

# NVML's enum values (nvml.h): clock types, the GPU temperature sensor, error codes.
_CLOCK_SM, _CLOCK_MEM, _TEMPERATURE_GPU = 1, 2, 0
_NOT_SUPPORTED, _FUNCTION_NOT_FOUND = 3, 13
_MIB = 1024 * 1024


def clock_event_names(bits: int) -> list[str]:
    """Every reason set in an NVML clock-event bitmask; an unknown bit by its value."""
    names = [name for name, bit in CLOCK_EVENT_BITS.items() if bits & bit]
    known = sum(CLOCK_EVENT_BITS.values())
    rest = bits & ~known
    names += [f"bit_{1 << i:#x}" for i in range(64) if rest & (1 << i)]
    return names


@dataclass(frozen=True)
class NoTelemetry:
    """Why this host records no GPU telemetry (not an error: a run goes on without it)."""

    reason: str


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str | None
    name: str | None
    handle: Any = field(repr=False, compare=False)

    def describe(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "name": self.name}


@dataclass(frozen=True)
class Selection:
    """The GPUs an engine uses, and each entry of its CUDA_VISIBLE_DEVICES NVML did not find."""

    gpus: list[Gpu]
    missing: list[str]
    source: str  # where the choice came from, for the manifest

    def describe(self) -> dict[str, Any]:
        return {
            "gpus": [g.describe() for g in self.gpus],
            "missing": self.missing,
            "selected_by": self.source,
        }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _binding_version() -> str:
    try:
        return f"nvidia-ml-py {importlib.metadata.version('nvidia-ml-py')}"
    except importlib.metadata.PackageNotFoundError:
        return "pynvml (no nvidia-ml-py distribution found)"


def _error_text(err: BaseException) -> str:
    try:
        return str(err) or type(err).__name__
    except Exception:  # an NVML error whose string needs the library itself
        return type(err).__name__


class Nvml:
    """An initialised NVML; `close()` shuts it down."""

    def __init__(self, module: Any) -> None:
        self.nvml = module
        self._error = module.NVMLError
        self._use_event_reasons = hasattr(module, "nvmlDeviceGetCurrentClocksEventReasons")

    def _code(self, err: BaseException) -> int | None:
        return getattr(err, "value", None)

    def facts(self) -> dict[str, Any]:
        """Driver, binding and every GPU NVML sees, for the manifest."""
        out: dict[str, Any] = {}
        try:
            out["driver_version"] = _text(self.nvml.nvmlSystemGetDriverVersion())
        except self._error as err:
            out["driver_version"] = f"unknown ({_error_text(err)})"
        out["binding"] = _binding_version()
        out["gpus"] = [g.describe() for g in self._all()]
        return out

    def _gpu(self, index: int) -> Gpu:
        handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = name = None
        try:
            uuid = _text(self.nvml.nvmlDeviceGetUUID(handle))
            name = _text(self.nvml.nvmlDeviceGetName(handle))
        except self._error:
            pass  # named by its index alone
        return Gpu(index, uuid, name, handle)

    def _all(self) -> list[Gpu]:
        return [self._gpu(i) for i in range(self.nvml.nvmlDeviceGetCount())]

    def select(self, cuda_visible: str | None, source: str = "CUDA_VISIBLE_DEVICES") -> Selection:
        """The GPUs named by a CUDA_VISIBLE_DEVICES value (None: every GPU NVML sees).

        Entries are indices or GPU UUIDs (a unique prefix, as CUDA takes them). An index is
        NVML's, which is PCI bus order: CUDA numbers GPUs the same way under
        CUDA_DEVICE_ORDER=PCI_BUS_ID, and each reading records the UUID, so a mismatch on
        a host with unlike GPUs shows. MIG instances are not sampled (named as missing)."""
        try:
            every = self._all()
        except self._error as err:
            return Selection([], [f"NVML could not list the GPUs: {_error_text(err)}"], source)
        if cuda_visible is None:
            return Selection(every, [], "all GPUs (CUDA_VISIBLE_DEVICES unset)")
        chosen: list[Gpu] = []
        missing: list[str] = []
        entries = [e.strip() for e in cuda_visible.split(",") if e.strip()]
        if not entries:
            missing.append("CUDA_VISIBLE_DEVICES is empty: the engine sees no GPU")
        for entry in entries:
            found = self._match(entry, every)
            if isinstance(found, str):
                missing.append(found)
            elif found not in chosen:
                chosen.append(found)
        return Selection(chosen, missing, f"{source}={cuda_visible}")

    @staticmethod
    def _match(entry: str, every: list[Gpu]) -> Gpu | str:
        seen = f"NVML sees {len(every)} GPU(s)"
        if entry.isdigit():
            by_index = [g for g in every if g.index == int(entry)]
            return by_index[0] if by_index else f"GPU {entry}: not found ({seen})"
        if entry.startswith("MIG-"):
            return f"{entry}: a MIG instance, not sampled"
        key = entry if entry.startswith("GPU-") else f"GPU-{entry}"
        by_uuid = [g for g in every if g.uuid and g.uuid.startswith(key)]
        if len(by_uuid) == 1:
            return by_uuid[0]
        return f"{entry}: {'ambiguous' if by_uuid else 'no GPU with that UUID'} ({seen})"

    def _clock_events(self, handle: Any) -> int:
        # The newer name first; an older binding lacks it, an older driver answers
        # FUNCTION_NOT_FOUND, and either way the older name reads the same bits.
        if self._use_event_reasons:
            try:
                return self.nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
            except self._error as err:
                if self._code(err) != _FUNCTION_NOT_FOUND:
                    raise
            self._use_event_reasons = False
        return self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)

    def read(self, gpu: Gpu) -> dict[str, Any]:
        """One reading of every figure (GpuReading's fields); never raises for NVML trouble."""
        n, h = self.nvml, gpu.handle
        calls: list[tuple[str, Any]] = [
            ("sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, _CLOCK_SM)),
            ("mem_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, _CLOCK_MEM)),
            ("power_w", lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0),  # mW
            ("power_limit_w", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
            ("temperature_c", lambda: n.nvmlDeviceGetTemperature(h, _TEMPERATURE_GPU)),
            ("utilization", lambda: n.nvmlDeviceGetUtilizationRates(h)),
            ("memory_used_mib", lambda: n.nvmlDeviceGetMemoryInfo(h).used / _MIB),  # bytes
            ("clock_event_bits", lambda: self._clock_events(h)),
        ]
        values: dict[str, Any] = {}
        for name, call in calls:
            try:
                values[name] = call()
            except self._error as err:
                if self._code(err) == _NOT_SUPPORTED:
                    continue  # this GPU does not report it: None, not a gap
                return {
                    "index": gpu.index,
                    "uuid": gpu.uuid,
                    "ok": False,
                    "error": f"{name}: {_error_text(err)}",
                }
        util = values.pop("utilization", None)
        if util is not None:
            values["gpu_util_pct"], values["mem_util_pct"] = util.gpu, util.memory
        bits = values.get("clock_event_bits")
        events = clock_event_names(int(bits)) if bits is not None else []
        return {"index": gpu.index, "uuid": gpu.uuid, "ok": True, "clock_events": events, **values}

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self._error:
            pass  # shutting down is best effort: the process ends soon after


def open_nvml() -> Nvml | NoTelemetry:
    """NVML initialised, or why there is no GPU telemetry on this host."""
    try:
        module = importlib.import_module("pynvml")
    except ImportError as err:
        return NoTelemetry(
            f"no GPU telemetry: the NVML binding (nvidia-ml-py) is not installed ({err})"
        )
    try:
        module.nvmlInit()
    except module.NVMLError as err:
        return NoTelemetry(f"no GPU telemetry: NVML did not start ({_error_text(err)})")
    except OSError as err:
        return NoTelemetry(f"no GPU telemetry: NVML did not load ({err})")
    nvml = Nvml(module)
    try:
        count = module.nvmlDeviceGetCount()
    except module.NVMLError as err:
        nvml.close()
        return NoTelemetry(f"no GPU telemetry: NVML lists no GPU ({_error_text(err)})")
    if count == 0:
        nvml.close()
        return NoTelemetry("no GPU telemetry: NVML started but sees no GPU")
    return nvml
