"""The doctor's lines about everything but the GPU: each engine environment, the
weights at their registered revisions, disk for the ones missing, ports, and stale
engines an earlier run left behind."""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from harness.doctor.check import Check
from harness.doctor.gpu import GIB, GpuReport, cuda_tuple
from harness.engines import get_engine_kind
from harness.engines.install.pins import pin_for_interpreter
from harness.engines.launch.base import looks_like_local_path
from harness.engines.running.attach import attach_problem
from harness.engines.running.process import port_in_use
from harness.engines.running.stale import StaleEngine, stop_stale_engine
from harness.prereg.schema import Study
from harness.run.environments import engine_interpreters
from harness.weights.cache import (
    find_checkpoint,
    hub_cache_dir,
    is_commit,
    local_checkpoint_missing,
)

_PROBE = (
    "import json, sys\n"
    "out = {'python': sys.version.split()[0]}\n"
    "try:\n"
    "    import {module} as e\n"
    "    out['version'] = str(getattr(e, '__version__', 'unknown'))\n"
    "except Exception as x:\n"
    "    out['error'] = type(x).__name__ + ': ' + str(x)\n"
    "try:\n"
    "    import torch\n"
    "    out['torch'], out['cuda'] = torch.__version__, torch.version.cuda\n"
    "except Exception:\n"
    "    pass\n"
    "print('specbench-doctor ' + json.dumps(out))\n"
)


def probe_environment(python: str, module: str, timeout_s: float = 300) -> dict:
    """What the interpreter imports: the engine's version, torch and its CUDA build."""
    if not Path(python).exists() and shutil.which(python) is None:
        return {"missing": True}
    try:
        out = subprocess.run(
            [python, "-c", _PROBE.replace("{module}", module)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"error": str(err)}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("specbench-doctor "):
            return json.loads(line.split(" ", 1)[1])
    tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"error": tail[0]}


def environment_checks(study: Study, gpu: GpuReport) -> list[Check]:
    interpreters = engine_interpreters(study)
    if not interpreters:
        return [Check("engine environments", "skip", "no arm starts an engine here")]
    kinds = {py: get_engine_kind(study.arm(arms[0]).engine) for py, arms in interpreters.items()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        probes = dict(
            zip(
                interpreters,
                pool.map(lambda py: probe_environment(py, kinds[py].engine_module), interpreters),
                strict=True,
            )
        )
    out = []
    for python, arms in interpreters.items():
        kind, found, pinned = kinds[python], probes[python], pin_for_interpreter(python)
        name = f"{kind.name} environment ({', '.join(arms)})"
        install = (
            f"specbench engines install {pinned.name}"
            + (" --force" if not found.get("missing") else "")
            if pinned
            else "install the engine there, or point the arm at its interpreter"
        )
        if found.get("missing"):
            out.append(
                Check(
                    name,
                    "FAIL",
                    f"interpreter {python} does not exist",
                    install + (f" (or set {pinned.variable})" if pinned else ""),
                )
            )
        elif "error" in found:
            out.append(
                Check(
                    name,
                    "FAIL",
                    f"{python} does not import {kind.engine_module}: {found['error']}",
                    install,
                )
            )
        elif not kind.version_matches(found["version"]):
            out.append(
                Check(
                    name,
                    "FAIL",
                    f"{kind.engine_module} {found['version']} at {python};"
                    f" specbench's flags were checked against {kind.expected_version}",
                    install if pinned else f"install {kind.engine_module} {kind.expected_version}",
                )
            )
        else:
            out.append(_cuda_check(name, python, kind.gpu, found, gpu, pinned))
    return out


def _cuda_check(name, python, needs_gpu, found, gpu: GpuReport, pinned) -> Check:
    what = f"{found['version']} at {python}"
    if pinned and found["version"] != pinned.version:
        return Check(
            name,
            "warn",
            f"{what}, not the pinned {pinned.version}",
            f"specbench engines install {pinned.name} --force",
        )
    torch = (
        f"; torch {found.get('torch')} (CUDA {found.get('cuda') or 'none'})"
        if found.get("torch")
        else ""
    )
    if needs_gpu and found.get("torch") and not found.get("cuda"):
        return Check(
            name,
            "FAIL",
            what + torch + ": a torch without CUDA cannot drive the GPU",
            "reinstall the environment with a CUDA build of torch",
        )
    built, runs = cuda_tuple(found.get("cuda")), cuda_tuple(gpu.cuda)
    if needs_gpu and built and runs and built > runs:
        return Check(
            name,
            "FAIL",
            f"{what}{torch}, but driver {gpu.driver} runs CUDA up to {gpu.cuda}",
            f"update the NVIDIA driver to one that runs CUDA {found['cuda']}",
        )
    return Check(name, "ok", what + torch)


def _checkpoints(study: Study) -> list[tuple[str, str, str | None, float | None]]:
    """(role, model, revision, estimated bytes) of every checkpoint a launched arm loads."""
    real = [a for a in study.arms if a.launch is not None and a.scripted is None]
    if not real:
        return []
    m = study.model
    out: list[tuple[str, str, str | None, float | None]] = [
        ("model", m.id, m.revision, m.params_billion * 1e9 * m.weight_bytes_per_param)
    ]
    for arm in real:
        d = arm.drafter
        if d is not None and d.model and (d.model, d.revision) not in {(o[1], o[2]) for o in out}:
            out.append((f"drafter of {arm.name}", d.model, d.revision, None))
    return out


def weight_checks(study: Study) -> list[Check]:
    """Weights present at their registered revisions, then disk for what is missing."""
    points = _checkpoints(study)
    if not points:
        return [Check("weights", "skip", "no arm loads a checkpoint here")]
    out, needed, unknown = [], 0.0, []
    cache = hub_cache_dir()
    for role, model, revision, estimate in points:
        name = f"weights: {role}"
        if looks_like_local_path(model):
            missing = local_checkpoint_missing(model)
            if missing is None:
                out.append(Check(name, "FAIL", f"{model} does not exist", "build or copy it there"))
            elif missing:
                out.append(Check(name, "FAIL", f"{model} lacks {', '.join(missing)}", "rebuild it"))
            else:
                out.append(Check(name, "ok", f"{model} (local folder)"))
            continue
        found = find_checkpoint(model, revision, cache)
        at = f"{model}@{revision or 'main (none registered)'}"
        get = (
            f"specbench fetch on this registration (it downloads {model} at"
            f" {found.commit or revision or 'main'} with the other checkpoints)"
        )
        if found.commit is not None and found.present:
            pinned = is_commit(revision)
            out.append(
                Check(
                    name,
                    "ok" if pinned else "warn",
                    f"{at} in the hub cache: snapshot {found.commit[:12]},"
                    f" {found.size_bytes / 1e9:.1f} GB",
                    None if pinned else f"register the commit {found.commit} (a branch moves)",
                )
            )
            continue
        detail = (
            f"{at}: snapshot {found.commit[:12]} lacks {', '.join(found.missing or [])}"
            if found.commit
            else f"{at} is not in the hub cache ({cache})"
        )
        out.append(Check(name, "FAIL", detail, get))
        if estimate is None:
            unknown.append(model)
        else:
            needed += estimate
    out.append(_disk_check(cache, needed, unknown))
    return out


def _disk_check(cache: Path, needed: float, unknown: list[str]) -> Check:
    probe = cache
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    where = f"{free / GIB:.1f} GiB free at {probe}"
    if needed == 0 and not unknown:
        return Check("disk for weights", "ok", f"nothing to download; {where}")
    sizes = f"the missing weights need about {needed / GIB:.1f} GiB" + (
        f" plus {', '.join(unknown)} (size unknown)" if unknown else ""
    )
    if free < needed * 1.1:
        return Check(
            "disk for weights",
            "FAIL",
            f"{where}; {sizes}",
            "free disk there, or set HF_HUB_CACHE to a larger disk",
        )
    return Check("disk for weights", "warn" if unknown else "ok", f"{where}; {sizes}")


def _holder(port: int) -> str:
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.pid:
                return f" by pid {conn.pid} ({' '.join(psutil.Process(conn.pid).cmdline())[:80]})"
    except psutil.Error:
        pass
    return ""


def port_checks(study: Study) -> list[Check]:
    out = []
    for arm in study.arms:
        if arm.attach is not None:
            problem = attach_problem(arm, study)
            out.append(
                Check(
                    f"endpoint of {arm.name}",
                    "FAIL" if problem else "ok",
                    problem or f"{arm.attach.base_url} serves {arm.attach.served_model}",
                    "start the endpoint, or launch the arm instead" if problem else None,
                )
            )
        elif arm.launch is not None and arm.launch.port is not None:
            host, port = arm.launch.host, arm.launch.port
            if port_in_use(host, port):
                out.append(
                    Check(
                        f"port of {arm.name}",
                        "FAIL",
                        f"{host}:{port} is in use{_holder(port)}",
                        "stop what holds it, or leave launch.port unset (a free port is picked)",
                    )
                )
            else:
                out.append(Check(f"port of {arm.name}", "ok", f"{host}:{port} is free"))
    if not any(a.launch is not None and a.launch.port is not None for a in study.arms):
        out.append(
            Check("ports", "ok", "no arm fixes a port: each engine gets a free one at start")
        )
    return out


def stale_checks(stale: list[StaleEngine], stop: bool, doctor_cmd: str) -> list[Check]:
    if not stale:
        return [Check("stale engines", "ok", "no engine of an earlier run is still running")]
    out = []
    for engine in stale:
        if not stop:
            out.append(
                Check(
                    "stale engine",
                    "FAIL",
                    engine.describe(),
                    f"{doctor_cmd} --stop-stale (or kill -TERM -{engine.pgid})",
                )
            )
            continue
        left = stop_stale_engine(engine)
        out.append(
            Check(
                "stale engine",
                "FAIL" if left else "ok",
                ("could not stop " if left else "stopped ") + engine.describe(),
                f"kill -KILL {' '.join(map(str, left))}" if left else None,
            )
        )
    return out
