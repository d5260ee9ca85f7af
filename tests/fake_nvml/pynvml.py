"""A test double of the NVML binding (`pynvml`, from nvidia-ml-py) at the harness's NVML
call boundary: the functions harness.measure.gpu calls, with the same names, units and
error type, answering from a scenario instead of a driver.

Put this folder first on sys.path (PYTHONPATH for a subprocess) and give the scenario
in FAKE_NVML (a JSON file's path, or the JSON itself), or call configure() in-process.
Scenario keys (all optional):
  init_error       NVML error code nvmlInit raises (12: library not found, 9: driver not loaded)
  gpus             [{name, uuid, sm_clock_mhz, mem_clock_mhz, power_w, power_limit_w,
                     temperature_c, gpu_util_pct, mem_util_pct, memory_used_mib}], default one H100
  clock_event_bits the clock-event bits every reading reports (default 0)
  events           [{gpu, calls: [n, ...], bits}]: the n-th clock-event read of that GPU (1-based,
                   counted over the process) reports these bits instead
  errors           [{gpu, function, calls: [n, ...], code}]: the n-th call of that function on
                   that GPU raises NVMLError(code) (15: GPU is lost)
  not_supported    [function, ...]: these raise NVMLError(3) (not supported) on every call
  old_binding      true: no nvmlDeviceGetCurrentClocksEventReasons (a binding before the rename)
  old_driver       true: that function raises NVMLError(13) (function not found)
  block_s          every device call sleeps this long first (the GIL is let go, as ctypes does)
State tests read: CALLS[(function, gpu)] (call counts), THREADS (ids of threads that called).
"""

from __future__ import annotations

import json
import os
import threading
import time
from types import SimpleNamespace

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

_MESSAGES = {
    1: "Uninitialized",
    3: "Not Supported",
    6: "Not Found",
    9: "Driver Not Loaded",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    15: "GPU is lost",
}

H100 = {
    "name": "NVIDIA H100 PCIe",
    "uuid": "GPU-11111111-2222-3333-4444-555555555555",
    "sm_clock_mhz": 1755,
    "mem_clock_mhz": 1593,
    "power_w": 280.0,
    "power_limit_w": 350.0,
    "temperature_c": 61,
    "gpu_util_pct": 97,
    "mem_util_pct": 60,
    "memory_used_mib": 72_000,
}


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"Unknown Error {self.value}")


_lock = threading.Lock()
SCENARIO: dict = {}
CALLS: dict[tuple[str, int], int] = {}
THREADS: set[int] = set()
_initialised = 0


def configure(scenario: dict | None) -> None:
    """Start over with this scenario (call counts, threads and init state reset)."""
    global SCENARIO, _initialised
    with _lock:
        SCENARIO = dict(scenario or {})
        CALLS.clear()
        THREADS.clear()
        _initialised = 0
    if SCENARIO.get("old_binding"):
        globals().pop("nvmlDeviceGetCurrentClocksEventReasons", None)
    else:
        globals()["nvmlDeviceGetCurrentClocksEventReasons"] = _clock_events_new


def _gpus() -> list[dict]:
    return [{**H100, **g} for g in SCENARIO.get("gpus", [{}])]


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


def _call(function: str, handle: _Handle) -> int:
    """Count the call, apply the scenario's block, errors and not-supported; the count."""
    if not _initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if SCENARIO.get("block_s"):
        time.sleep(SCENARIO["block_s"])
    with _lock:
        key = (function, handle.index)
        CALLS[key] = CALLS.get(key, 0) + 1
        THREADS.add(threading.get_ident())
        n = CALLS[key]
    if function in SCENARIO.get("not_supported", []):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    for err in SCENARIO.get("errors", []):
        if (
            err.get("function") == function
            and err.get("gpu", 0) == handle.index
            and n in err.get("calls", [])
        ):
            raise NVMLError(err["code"])
    return n


def _bits(handle: _Handle, n: int) -> int:
    for event in SCENARIO.get("events", []):
        if event.get("gpu", 0) == handle.index and n in event.get("calls", []):
            return int(event["bits"])
    return int(SCENARIO.get("clock_event_bits", 0))


# --- the library --------------------------------------------------------------------


def nvmlInit() -> None:
    global _initialised
    code = SCENARIO.get("init_error")
    if code:
        raise NVMLError(code)
    _initialised += 1


def nvmlShutdown() -> None:
    global _initialised
    if not _initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    _initialised -= 1


def nvmlSystemGetDriverVersion() -> str:
    return "550.54.15 (fake)"


def nvmlDeviceGetCount() -> int:
    if not _initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _Handle(index)


def nvmlDeviceGetUUID(handle: _Handle) -> str:
    return _gpus()[handle.index]["uuid"]


def nvmlDeviceGetName(handle: _Handle) -> str:
    return _gpus()[handle.index]["name"]


def _figure(handle: _Handle, key: str) -> float:
    return _gpus()[handle.index][key]


def nvmlDeviceGetClockInfo(handle: _Handle, clock: int) -> int:
    _call("nvmlDeviceGetClockInfo", handle)
    return int(_figure(handle, "sm_clock_mhz" if clock == NVML_CLOCK_SM else "mem_clock_mhz"))


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
    _call("nvmlDeviceGetPowerUsage", handle)
    return int(_figure(handle, "power_w") * 1000)  # mW, as NVML answers


def nvmlDeviceGetEnforcedPowerLimit(handle: _Handle) -> int:
    _call("nvmlDeviceGetEnforcedPowerLimit", handle)
    return int(_figure(handle, "power_limit_w") * 1000)


def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
    _call("nvmlDeviceGetTemperature", handle)
    return int(_figure(handle, "temperature_c"))


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> SimpleNamespace:
    _call("nvmlDeviceGetUtilizationRates", handle)
    return SimpleNamespace(
        gpu=int(_figure(handle, "gpu_util_pct")), memory=int(_figure(handle, "mem_util_pct"))
    )


def nvmlDeviceGetMemoryInfo(handle: _Handle) -> SimpleNamespace:
    _call("nvmlDeviceGetMemoryInfo", handle)
    used = int(_figure(handle, "memory_used_mib") * 1024 * 1024)  # bytes
    return SimpleNamespace(used=used, total=80 * 1024**3, free=80 * 1024**3 - used)


def _clock_events_new(handle: _Handle) -> int:
    if SCENARIO.get("old_driver"):
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    return _bits(handle, _call("clock_events", handle))


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: _Handle) -> int:
    return _bits(handle, _call("clock_events", handle))


nvmlDeviceGetCurrentClocksEventReasons = _clock_events_new

_env = os.environ.get("FAKE_NVML")
if _env:
    configure(
        json.loads(_env)
        if _env.lstrip().startswith("{")
        else json.loads(open(_env, encoding="utf-8").read())
    )
