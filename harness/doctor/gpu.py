"""What the GPU host's driver says, through NVML (the nvidia-ml-py package, `pynvml`).

`gpu_report()` never raises: on a host without a GPU, a driver or the library, it
returns a report with `error` set and no devices, and the doctor says "no GPU".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

GIB = 1024**3


@dataclass
class GpuProcess:
    pid: int
    used_bytes: int | None


@dataclass
class GpuStatus:
    index: int
    name: str
    total_bytes: int
    free_bytes: int
    processes: list[GpuProcess] = field(default_factory=list)


@dataclass
class GpuReport:
    error: str | None = None  # why there are no GPU facts
    driver: str | None = None
    cuda: str | None = None  # the highest CUDA version the driver supports, "12.4"
    gpus: list[GpuStatus] = field(default_factory=list)


def load_nvml() -> ModuleType:
    """The NVML bindings (tests replace this with a fake)."""
    import pynvml

    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _processes(nvml: Any, handle: Any) -> list[GpuProcess]:
    seen: dict[int, GpuProcess] = {}
    for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        fn = getattr(nvml, query, None)
        if fn is None:
            continue
        try:
            for p in fn(handle):
                used = getattr(p, "usedGpuMemory", None)
                seen.setdefault(int(p.pid), GpuProcess(int(p.pid), int(used) if used else None))
        except Exception:  # noqa: BLE001 -- an unsupported query on this GPU: no list
            continue
    return list(seen.values())


def gpu_report() -> GpuReport:
    try:
        nvml = load_nvml()
    except ImportError:
        return GpuReport(error="nvidia-ml-py (pynvml) is not installed")
    try:
        nvml.nvmlInit()
    except Exception as err:  # noqa: BLE001 -- NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return GpuReport(error=f"NVML: {_text(err) or type(err).__name__}")
    try:
        report = GpuReport(driver=_text(nvml.nvmlSystemGetDriverVersion()))
        try:
            cuda = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
            report.cuda = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except Exception:  # noqa: BLE001
            report.cuda = None
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            report.gpus.append(
                GpuStatus(
                    i,
                    _text(nvml.nvmlDeviceGetName(handle)),
                    int(mem.total),
                    int(mem.free),
                    _processes(nvml, handle),
                )
            )
        if not report.gpus:
            report.error = "NVML reports no GPU"
        return report
    except Exception as err:  # noqa: BLE001
        return GpuReport(error=f"NVML: {_text(err) or type(err).__name__}")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


_MEMORY = re.compile(r"^(\d+)gb$")


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t and t != "nvidia"]


def gpu_matches(registered: str, gpu: GpuStatus) -> bool:
    """Whether a device is the registered GPU: every word of the registered name is in
    the device's name ("H100-PCIe-80GB" is "NVIDIA H100 PCIe", not "NVIDIA H100 80GB
    HBM3"), and a memory size ("80GB") is within 10 % of the device's memory."""
    have = set(_tokens(gpu.name))
    for token in _tokens(registered):
        size = _MEMORY.match(token)
        if size and token not in have:
            if abs(gpu.total_bytes / GIB - int(size.group(1))) > 0.1 * int(size.group(1)):
                return False
        elif not size and token not in have:
            return False
    return True


def cuda_tuple(version: str | None) -> tuple[int, int] | None:
    if not version:
        return None
    m = re.match(r"^(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None
