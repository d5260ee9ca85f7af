"""GPU telemetry at the NVML call boundary, through the fake binding (tests/fake_nvml):
opening NVML or saying why not, choosing the engine's GPUs, one reading, the sampler
thread, and which clock-event reasons make a cell throttled."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.derived.throttle import gpu_throttle
from harness.derived.usable import unusable_reason
from harness.measure.gpu import NoTelemetry, Nvml, clock_event_names, open_nvml
from harness.measure.gpu_sampler import GpuSampler
from harness.records import GpuReading, GpuSample, RequestRecord

FAKE = Path(__file__).resolve().parents[1] / "fake_nvml" / "pynvml.py"
UUID0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID1 = "GPU-bbbbbbbb-1111-1111-1111-111111111111"
TWO_GPUS = {"gpus": [{"uuid": UUID0}, {"uuid": UUID1, "name": "NVIDIA H100 80GB HBM3"}]}


@pytest.fixture
def fake(monkeypatch):
    """The fake binding as `pynvml`; `fake.configure(scenario)` sets what it answers."""
    spec = importlib.util.spec_from_file_location("pynvml", FAKE)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.delenv("FAKE_NVML", raising=False)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    module.configure({})
    return module


def read(nvml: Nvml, gpu) -> GpuReading:
    """One reading, checked against the record the sampler writes (extra fields refused)."""
    return GpuReading.model_validate(nvml.read(gpu))


def opened(fake, scenario: dict) -> Nvml:
    fake.configure(scenario)
    nvml = open_nvml()
    assert isinstance(nvml, Nvml), nvml
    return nvml


# --- opening NVML, or why not ---------------------------------------------------------


def test_no_binding_is_no_telemetry_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    got = open_nvml()
    assert isinstance(got, NoTelemetry)
    assert got.reason.startswith("no GPU telemetry: the NVML binding (nvidia-ml-py)")


@pytest.mark.parametrize(
    ("code", "says"), [(12, "NVML Shared Library Not Found"), (9, "Driver Not Loaded")]
)
def test_nvml_that_does_not_start_is_no_telemetry(fake, code, says):
    fake.configure({"init_error": code})
    got = open_nvml()
    assert got == NoTelemetry(f"no GPU telemetry: NVML did not start ({says})")


def test_nvml_without_a_gpu_is_no_telemetry_and_shut_down(fake):
    fake.configure({"gpus": []})
    assert open_nvml() == NoTelemetry("no GPU telemetry: NVML started but sees no GPU")
    assert fake._initialised == 0


def test_this_hosts_real_binding_never_raises():
    """Whatever this host has (here: the binding and no driver), open_nvml answers."""
    got = open_nvml()
    if isinstance(got, Nvml):
        got.close()
    else:
        assert got.reason.startswith("no GPU telemetry: ")


# --- which GPUs ---------------------------------------------------------------------


def test_every_gpu_when_cuda_visible_devices_is_unset(fake):
    sel = opened(fake, TWO_GPUS).select(None)
    assert [g.index for g in sel.gpus] == [0, 1] and sel.missing == []
    assert sel.gpus[1].name == "NVIDIA H100 80GB HBM3" and sel.gpus[1].uuid == UUID1


def test_cuda_visible_devices_by_index_and_by_uuid_prefix(fake):
    nvml = opened(fake, TWO_GPUS)
    assert [g.index for g in nvml.select("1").gpus] == [1]
    assert [g.index for g in nvml.select("GPU-bbbb,0").gpus] == [1, 0]


def test_a_missing_gpu_is_named_and_the_others_kept(fake):
    nvml = opened(fake, TWO_GPUS)
    sel = nvml.select("0,3", "arm a's CUDA_VISIBLE_DEVICES")
    assert [g.index for g in sel.gpus] == [0]
    assert sel.missing == ["GPU 3: not found (NVML sees 2 GPU(s))"]
    assert sel.describe()["selected_by"] == "arm a's CUDA_VISIBLE_DEVICES=0,3"
    assert nvml.select("GPU-cccc").missing == [
        "GPU-cccc: no GPU with that UUID (NVML sees 2 GPU(s))"
    ]
    assert nvml.select("GPU-").missing == ["GPU-: ambiguous (NVML sees 2 GPU(s))"]
    assert nvml.select("MIG-abc").missing == ["MIG-abc: a MIG instance, not sampled"]
    empty = nvml.select("")
    assert empty.gpus == [] and empty.missing == [
        "CUDA_VISIBLE_DEVICES is empty: the engine sees no GPU"
    ]


# --- one reading --------------------------------------------------------------------


def test_a_reading_converts_nvml_units_and_names_every_clock_event(fake):
    nvml = opened(fake, {"clock_event_bits": 0x4 | 0x1 | 0x400})
    r = read(nvml, nvml.select(None).gpus[0])
    assert r.ok and r.error is None
    assert (r.sm_clock_mhz, r.mem_clock_mhz) == (1755, 1593)
    assert (r.power_w, r.power_limit_w) == (280.0, 350.0)  # NVML answers milliwatts
    assert (r.temperature_c, r.gpu_util_pct, r.mem_util_pct) == (61, 97, 60)
    assert r.memory_used_mib == 72_000  # NVML answers bytes
    assert r.clock_event_bits == 0x405
    assert r.clock_events == ["gpu_idle", "sw_power_cap", "bit_0x400"]


@pytest.mark.parametrize("age", ["old_binding", "old_driver"])
def test_the_older_throttle_reasons_call_is_used_when_the_newer_is_missing(fake, age):
    nvml = opened(fake, {age: True, "clock_event_bits": 0x40})
    gpu = nvml.select(None).gpus[0]
    assert read(nvml, gpu).clock_events == ["hw_thermal"]
    assert read(nvml, gpu).clock_events == ["hw_thermal"]
    assert fake.CALLS[("clock_events", 0)] == 2  # each reading read the bits once


def test_a_figure_the_gpu_does_not_support_is_none_not_a_gap(fake):
    nvml = opened(
        fake, {"not_supported": ["nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage"]}
    )
    r = read(nvml, nvml.select(None).gpus[0])
    assert r.ok and r.power_w is None and r.gpu_util_pct is None and r.mem_util_pct is None
    assert r.sm_clock_mhz == 1755 and r.temperature_c == 61


def test_an_nvml_error_makes_the_reading_a_gap_that_says_why(fake):
    nvml = opened(
        fake, {"errors": [{"function": "nvmlDeviceGetPowerUsage", "calls": [2], "code": 15}]}
    )
    gpu = nvml.select(None).gpus[0]
    first, second, third = (read(nvml, gpu) for _ in range(3))
    assert first.ok and third.ok
    assert not second.ok and second.error == "power_w: GPU is lost"
    assert second.sm_clock_mhz is None and second.uuid == fake.H100["uuid"]


def test_clock_event_names_keep_unknown_bits():
    assert clock_event_names(0) == []
    assert clock_event_names(0x8 | 0x80 | 0x1000) == ["hw_slowdown", "hw_power_brake", "bit_0x1000"]


# --- the sampler thread -------------------------------------------------------------


def run_sampler(nvml: Nvml, seconds: float, interval_s: float = 0.05) -> list[GpuSample]:
    samples: list[GpuSample] = []
    sampler = GpuSampler(
        nvml=nvml,
        gpus=nvml.select(None).gpus,
        interval_s=interval_s,
        cell_id="a/chat/speed/c001",
        attempt=2,
        on_sample=samples.append,
    )
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return samples


def test_the_sampler_reads_on_its_own_thread_on_the_grid_and_ends_with_a_final_sample(fake):
    nvml = opened(fake, TWO_GPUS)
    samples = run_sampler(nvml, 0.3)
    assert len(samples) >= 3 and samples[-1].final and not any(s.final for s in samples[:-1])
    on_grid = [s for s in samples if not s.final]
    steps = [round((b.t - a.t) / 0.05, 6) for a, b in zip(on_grid, on_grid[1:], strict=False)]
    assert all(step == round(step) and step >= 1 for step in steps), steps  # a grid, no drift
    for s in samples:
        assert (s.cell_id, s.attempt) == ("a/chat/speed/c001", 2)
        assert [r.index for r in s.gpus] == [0, 1] or not s.ok
    # Never the caller's thread: NVML calls block, and the caller runs the event loop.
    assert fake.THREADS and threading.get_ident() not in fake.THREADS


def test_nothing_arrives_after_stop(fake):
    nvml = opened(fake, {})
    samples = run_sampler(nvml, 0.1)
    n = len(samples)
    time.sleep(0.15)
    assert len(samples) == n


def test_an_nvml_error_mid_run_is_one_gap_and_sampling_goes_on(fake):
    nvml = opened(
        fake, {"errors": [{"function": "nvmlDeviceGetTemperature", "calls": [2], "code": 15}]}
    )
    read = [s for s in run_sampler(nvml, 0.3) if s.gpus]  # ticks missed on a busy host aside
    bad = [s for s in read if not s.ok]
    assert len(bad) == 1 and bad[0] is read[1]
    assert bad[0].gpus[0].error == "temperature_c: GPU is lost"
    assert read[2].ok and read[2].gpus[0].temperature_c == 61


def test_a_binding_that_raises_something_else_costs_a_sample_not_the_cell(fake):
    nvml = opened(fake, {})
    calls = {"n": 0}
    real = nvml.read

    def flaky(gpu):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("binding fault")
        return real(gpu)

    nvml.read = flaky  # type: ignore[method-assign]
    read = [s for s in run_sampler(nvml, 0.2) if s.gpus]
    assert read[0].gpus[0].error == "RuntimeError: binding fault"
    assert len(read) >= 2 and all(s.ok for s in read[1:])


@pytest.mark.timing
def test_a_blocking_nvml_call_does_not_hold_the_event_loop(fake):
    """Each fake call blocks 40 ms with the GIL let go (as ctypes does): eight calls make
    a 320 ms reading. On the sampler's thread, the loop's 5 ms ticks keep coming; the
    assertion is on counts of ticks against a reading's length, not on a latency."""
    nvml = opened(fake, {"block_s": 0.04})

    async def ticks_during_one_reading() -> int:
        done = threading.Event()
        samples: list[GpuSample] = []

        def on_sample(s: GpuSample) -> None:
            samples.append(s)
            done.set()

        sampler = GpuSampler(
            nvml=nvml,
            gpus=nvml.select(None).gpus,
            interval_s=10.0,
            cell_id="c",
            attempt=1,
            on_sample=on_sample,
        )
        sampler.start()
        n = 0
        while not done.is_set():
            await asyncio.sleep(0.005)
            n += 1
        await asyncio.to_thread(sampler.stop, 5.0)
        assert samples[0].took_s is not None
        assert samples[0].took_s >= 0.3
        return n

    # Run on the loop itself, the same reading would allow no tick at all.
    assert asyncio.run(ticks_during_one_reading()) >= 10


# --- throttled or not ----------------------------------------------------------------


def sample(*events: list[str], ok: bool = True) -> GpuSample:
    gpus = [GpuReading(index=i, ok=ok, clock_events=e) for i, e in enumerate(events)]
    return GpuSample(cell_id="c", t=0.0, wall_time=0.0, ok=ok, gpus=gpus)


def test_power_thermal_and_hardware_slowdowns_throttle_a_cell():
    for reason in ("sw_power_cap", "hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake"):
        t = gpu_throttle([sample([]), sample([reason, "gpu_idle"])])
        assert t is not None and t.throttled and t.reasons == (reason,)
    t = gpu_throttle(
        [sample(["sw_power_cap"], []), sample([], ["hw_thermal", "sw_power_cap"]), sample([], [])]
    )
    assert t is not None
    assert (t.ticks, t.throttled_ticks, t.reasons, t.gpus) == (
        3,
        2,
        ("sw_power_cap", "hw_thermal"),
        (0, 1),
    )
    assert t.describe() == "sw_power_cap/hw_thermal in 2 of 3 samples (GPU 0, GPU 1)"


def test_idle_and_clock_settings_do_not_throttle_a_cell():
    t = gpu_throttle(
        [sample(["gpu_idle", "applications_clocks", "sync_boost", "display_clocks", "bit_0x200"])]
    )
    assert t is not None and not t.throttled and t.reasons == ()


def test_no_readings_is_no_throttle_figure():
    assert gpu_throttle([]) is None
    assert gpu_throttle([sample(["sw_power_cap"], ok=False)]) is None  # gaps say nothing


def _speed_requests() -> list[RequestRecord]:
    return [
        RequestRecord(
            cell_id="c",
            index=0,
            item_id="i",
            scheduled_t=0.0,
            sent_t=0.0,
            first_token_t=1.0,
            end_t=2.0,
            completion_tokens=10,
        )
    ]


@pytest.mark.parametrize(
    ("kind", "policy", "unusable"),
    [
        ("speed", "remeasure", True),
        ("open", "remeasure", True),
        ("speed", "flag", False),
        ("identity", "remeasure", False),
        ("accuracy", "remeasure", False),
    ],
)
def test_only_remeasure_makes_a_throttled_timed_cell_unusable(kind, policy, unusable):
    throttled = gpu_throttle([sample(["hw_slowdown"])])
    reason = unusable_reason(
        kind=kind, requests=_speed_requests(), gpu_throttle=throttled, gpu_throttle_policy=policy
    )
    assert (reason == "GPU throttled: hw_slowdown in 1 of 1 samples (GPU 0)") is unusable
    assert reason is None or unusable
    calm = gpu_throttle([sample(["gpu_idle"])])
    assert (
        unusable_reason(
            kind=kind,
            requests=_speed_requests(),
            gpu_throttle=calm,
            gpu_throttle_policy="remeasure",
        )
        is None
    )
