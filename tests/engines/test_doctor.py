"""`specbench doctor`: GPU lines from a fake NVML (a matching GPU, a wrong GPU, a GPU
another process holds memory on), weights in a hand-made hub cache, engine
environments, ports, stale engines; and the real run on this GPU-less machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.doctor import gpu as gpu_module
from harness.doctor import run_doctor
from harness.doctor.gpu import GIB, GpuStatus, gpu_matches
from harness.prereg import load_study
from harness.weights.cache import find_checkpoint
from tests.tiny_study import tiny_study

ROOT = Path(__file__).resolve().parents[2]
SHA = "a" * 40


class FakeNvml:
    """The pynvml calls the doctor makes, answering for the GPUs given."""

    class NVMLError(Exception):
        pass

    def __init__(
        self,
        gpus: list[dict],
        driver: str = "580.65.06",
        cuda: int = 13000,
        fail_init: str | None = None,
    ) -> None:
        self.gpus, self.driver, self.cuda, self.fail_init = gpus, driver, cuda, fail_init
        self.shutdown = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError(self.fail_init)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: dict) -> bytes:
        return h["name"].encode()

    def nvmlDeviceGetMemoryInfo(self, h: dict) -> SimpleNamespace:
        return SimpleNamespace(total=h["total"], free=h["free"], used=h["total"] - h["free"])

    def nvmlDeviceGetComputeRunningProcesses(self, h: dict) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in h.get("procs", [])]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: dict) -> list:
        return []


H100_PCIE = {"name": "NVIDIA H100 PCIe", "total": 81559 * 1024**2, "free": 80900 * 1024**2}


def gpu_study(tmp_path: Path, gpu: str = "H100-PCIe-80GB", extra: list[str] | None = None):
    """A one-arm vLLM study on the GPU, its interpreter a fake that 'imports' vLLM."""
    python = tmp_path / "engine-python"
    python.write_text(
        "#!/bin/sh\n"
        'echo \'specbench-doctor {"python": "3.12.3", "version": "0.32.0",'
        ' "torch": "2.13.0+cu130", "cuda": "13.0"}\'\n'
    )
    python.chmod(0o755)
    arm = {
        "name": "base",
        "engine": "vllm",
        "launch": {"python": str(python), "extra_args": extra or []},
    }
    study = tiny_study("Org/Model", [arm], revision=SHA)
    hardware = {**study.hardware.model_dump(), "gpu": gpu}
    return study.model_copy(update={"hardware": study.hardware.model_validate(hardware)})


def cached_model(
    cache: Path, repo: str, commit: str, *, ref: str | None = None, weights: bool = True
) -> None:
    root = cache / ("models--" + repo.replace("/", "--"))
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    if weights:
        (snap / "model.safetensors").write_bytes(b"\0" * 1024)
    if ref:
        (root / "refs").mkdir()
        (root / "refs" / ref).write_text(commit)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def use_nvml(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml) -> None:
    monkeypatch.setattr(gpu_module, "load_nvml", lambda: fake)


def by_name(checks) -> dict:
    out: dict = {}
    for c in checks:
        out.setdefault(c.name, c)
    return out


def test_matching_gpu_passes_every_gpu_check(tmp_path, hub, monkeypatch) -> None:
    cached_model(hub, "Org/Model", SHA)
    fake = FakeNvml([H100_PCIE])
    use_nvml(monkeypatch, fake)
    checks = run_doctor(gpu_study(tmp_path), tmp_path / "results")
    got = by_name(checks)
    assert got["GPU"].status == "ok" and "NVIDIA H100 PCIe" in got["GPU"].detail
    assert got["driver and CUDA"].detail.startswith("driver 580.65.06, CUDA 13.0")
    assert got["other GPU processes"].status == "ok"
    assert got["free GPU memory"].status == "ok"
    assert "--gpu-memory-utilization 0.92 of arm base" in got["free GPU memory"].detail
    env = got["vllm environment (base)"]
    assert env.status == "ok" and "0.32.0" in env.detail and "CUDA 13.0" in env.detail
    assert got["weights: model"].status == "ok" and SHA[:12] in got["weights: model"].detail
    assert [c for c in checks if c.blocker] == [], [c.line() for c in checks]
    assert fake.shutdown


def test_wrong_gpu_is_a_blocker_naming_both(tmp_path, hub, monkeypatch) -> None:
    cached_model(hub, "Org/Model", SHA)
    sxm = {"name": "NVIDIA H100 80GB HBM3", "total": 81559 * 1024**2, "free": 80000 * 1024**2}
    use_nvml(monkeypatch, FakeNvml([sxm]))
    gpu = by_name(run_doctor(gpu_study(tmp_path), tmp_path / "results"))["GPU"]
    assert gpu.blocker
    assert "NVIDIA H100 80GB HBM3" in gpu.detail and "1 x H100-PCIe-80GB" in gpu.detail
    assert "registered GPU" in gpu.fix


def test_another_process_on_the_gpu_is_named_and_free_memory_judged(tmp_path, hub, monkeypatch):
    cached_model(hub, "Org/Model", SHA)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = {**H100_PCIE, "free": 20 * GIB, "procs": [(other.pid, 60 * GIB)]}
        use_nvml(monkeypatch, FakeNvml([busy]))
        got = by_name(
            run_doctor(
                gpu_study(tmp_path, extra=["--gpu-memory-utilization", "0.5"]), tmp_path / "results"
            )
        )
    finally:
        other.kill()
        other.wait()
    procs = got["other GPU processes"]
    assert procs.blocker and f"pid {other.pid}: {sys.executable} -c import time" in procs.detail
    assert "60.0 GiB" in procs.detail and f"kill {other.pid}" in procs.fix
    free = got["free GPU memory"]
    assert free.blocker and "20.0 GiB of 79.6 GiB free" in free.detail
    assert "--gpu-memory-utilization 0.5 of arm base needs 39.8 GiB" in free.detail


def test_no_gpu_says_so_and_still_checks_the_rest(tmp_path, hub, monkeypatch) -> None:
    use_nvml(monkeypatch, FakeNvml([], fail_init="Driver Not Loaded"))
    checks = run_doctor(gpu_study(tmp_path), tmp_path / "results")
    got = by_name(checks)
    assert got["GPU"].blocker and got["GPU"].detail.startswith("no GPU (NVML: Driver Not Loaded)")
    assert got["free GPU memory"].status == "skip"
    assert got["vllm environment (base)"].status == "ok"  # checked all the same
    assert got["weights: model"].blocker  # nothing cached
    assert got["weights: model"].fix == (
        f"specbench fetch on this registration (it downloads Org/Model at {SHA} with the"
        " other checkpoints)"
    )


def test_cpu_study_needs_no_gpu(tmp_path, hub, monkeypatch) -> None:
    use_nvml(monkeypatch, FakeNvml([], fail_init="NVML Shared Library Not Found"))
    study = load_study(ROOT / "examples" / "scripted-pass.yaml")
    checks = run_doctor(study, tmp_path / "results")
    got = by_name(checks)
    assert got["GPU"].status == "ok" and "none needed" in got["GPU"].detail
    assert got["weights"].status == "skip"
    assert [c for c in checks if c.blocker] == [], [c.line() for c in checks]


def test_gpu_names_and_hub_cache_revisions() -> None:
    pcie = GpuStatus(0, "NVIDIA H100 PCIe", 81559 * 1024**2, 0)
    assert gpu_matches("H100-PCIe-80GB", pcie)
    assert not gpu_matches(
        "H100-PCIe-80GB", GpuStatus(0, "NVIDIA H100 80GB HBM3", pcie.total_bytes, 0)
    )
    assert not gpu_matches("H100-PCIe-80GB", GpuStatus(0, "NVIDIA H100 PCIe", 40 * GIB, 0))
    assert not gpu_matches("A100", pcie)


def test_branch_revisions_and_incomplete_snapshots(tmp_path: Path) -> None:
    cached_model(tmp_path, "Org/Pinned", SHA, ref="main")
    cached_model(tmp_path, "Org/Empty", "b" * 40, weights=False)
    assert find_checkpoint("Org/Pinned", SHA, tmp_path).present
    branch = find_checkpoint("Org/Pinned", "main", tmp_path)
    assert branch.present and branch.commit == SHA
    assert not find_checkpoint("Org/Pinned", "c" * 40, tmp_path).present
    empty = find_checkpoint("Org/Empty", "b" * 40, tmp_path)
    assert empty.commit and empty.missing == ["weights (*.safetensors)"]
    assert find_checkpoint("Org/Absent", None, tmp_path).commit is None


def _real_gpu_count() -> int | None:
    """GPUs the real NVML sees on this host (None: no driver, as on the CI machines)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None


def test_doctor_on_this_machine_with_real_nvml(tmp_path: Path) -> None:
    """The real command, real NVML: on a host without a driver, "no GPU", the GPU checks
    skipped and a non-zero exit naming the blockers; on a host with GPUs, the GPU checks
    run on them (a GPU other than the registered H100 is a blocker naming both)."""
    gpus = _real_gpu_count()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "doctor",
            "prereg.yaml",
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = out.stdout.splitlines()
    assert "1 x H100-PCIe-80GB" in lines[1] and "Traceback" not in out.stderr, out.stderr
    for name in (
        "vllm environment (",
        "sglang environment (",
        "weights: model:",
        "disk for weights:",
        "ports:",
        "stale engines:",
    ):
        assert any(line[6:].startswith(name) for line in lines), (name, lines)
    checks = ("driver and CUDA", "other GPU processes", "free GPU memory")
    if not gpus:
        assert out.returncode == 1, out.stdout + out.stderr
        assert lines[1].startswith("FAIL  GPU: no GPU (")
        for name in checks:
            assert f"skip  {name}: no GPU" in lines
        assert "blocker(s): GPU" in out.stderr
    else:  # a GPU host: the checks ran on its GPUs, none skipped for want of one
        assert lines[1][6:].startswith("GPU: ") and "no GPU" not in lines[1], lines[1]
        for name in checks:
            assert any(
                line[6:].startswith(f"{name}:") and "no GPU" not in line for line in lines
            ), (name, lines)


def test_stale_engines_of_earlier_runs_are_named_then_stopped(tmp_path, hub, monkeypatch) -> None:
    import json
    import time

    from harness.rundir.engines import EngineStart
    from harness.rundir.manifest import Manifest

    use_nvml(monkeypatch, FakeNvml([], fail_init="Driver Not Loaded"))
    command = [sys.executable, "-c", "import time; time.sleep(120)"]
    started = time.time()
    engine = subprocess.Popen(command, start_new_session=True)
    try:
        run = tmp_path / "results" / "old-run"
        run.mkdir(parents=True)
        record = EngineStart(
            arm="base",
            kind="scripted",
            metrics_dialect="vllm",
            launched=True,
            pid=engine.pid,
            pgid=engine.pid,
            port=1,
            host="127.0.0.1",
            command=command,
            started_wall=started,
            started_iso="-",
            base_url="http://127.0.0.1:1",
            served_model="scripted",
            state="ready",
        )
        manifest = Manifest(run_id="old-run", engines={"base": [record]})
        (run / "manifest.json").write_text(json.dumps(manifest.to_json()))
        study = load_study(ROOT / "examples" / "scripted-pass.yaml")
        named = by_name(run_doctor(study, tmp_path / "results", doctor_cmd="specbench doctor X"))
        stale = named["stale engine"]
        assert (
            stale.blocker and f"pid {engine.pid}" in stale.detail and "run old-run" in stale.detail
        )
        assert stale.fix.startswith("specbench doctor X --stop-stale")
        assert engine.poll() is None  # named, not touched
        stopped = by_name(run_doctor(study, tmp_path / "results", stop_stale=True))["stale engine"]
        assert stopped.status == "ok" and stopped.detail.startswith("stopped engine of arm 'base'")
        assert engine.wait(timeout=10) is not None
    finally:
        if engine.poll() is None:
            engine.kill()
