"""`specbench engines warm sglang`: SGLang's DeepGEMM compile for a study's model, run in
the SGLang engine environment with progress, or printed as one shell line.

Why: a cold first SGLang start on an FP8 model spends 10-20 minutes compiling DeepGEMM
kernels (harness/engines/install/deepgemm.py) inside the engine's startup timeout and the run's
GPU time; compiled once beforehand, the kernels are loaded from SGLang's cache.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import paths
from harness.engines import get_engine_kind
from harness.engines.install.deepgemm import (
    COMPILE_MODULE,
    cache_dir,
    compile_command,
    tp_size,
    warm_arm,
    write_marker,
)
from harness.engines.install.pins import interpreter_for, pin
from harness.engines.launch.base import expand_study_leaving_unset
from harness.engines.launch.command_line import quote
from harness.engines.running.process import free_port, spawn, stop_group, tail_lines
from harness.errors import InputError, SpecbenchError
from harness.prereg import load_study

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study

# A progress line this often while the compile runs (tests shorten it).
PROGRESS_EVERY_S = 30.0
# Beyond SGLang's own --timeout (its server must answer within it), time for the request
# and its shutdown before specbench stops the compile itself.
SHUTDOWN_MARGIN_S = 600
_PROBE = (
    "import importlib.util, sys;"
    " sys.exit(0 if importlib.util.find_spec('sglang.compile_deep_gemm') else 3)"
)


def environment_problem(python: str) -> str | None:
    """Why this interpreter cannot run the compile (None: it can): missing, or without
    sglang.compile_deep_gemm (find_spec imports only the `sglang` package, not the server)."""
    p = pin("sglang")
    fix = (
        f"`specbench engines install sglang` installs {p.requirement}, or set {p.variable}"
        " to the SGLang environment's python"
    )
    if not Path(python).exists():
        return f"the SGLang engine environment is missing: {python} does not exist ({fix})"
    try:
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"the SGLang engine environment at {python} does not run: {err} ({fix})"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return (
            f"the SGLang engine environment at {python} has no {COMPILE_MODULE}"
            f" (exit {proc.returncode}: {last}) ({fix})"
        )
    return None


def warm_sglang(
    prereg: str,
    *,
    arm_name: str | None = None,
    timeout_s: int = 3600,
    port: int | None = None,
    print_only: bool = False,
) -> int:
    registered = load_study(prereg)
    # Expanded as on this machine (the pinned interpreters as defaults); an unset ${VAR}
    # stays in a printed line and stops a real compile.
    study, unset = expand_study_leaving_unset(registered)
    arm = warm_arm(study, arm_name)
    assert arm.launch is not None  # warm_arm: an arm specbench starts
    python = interpreter_for("sglang")
    host = arm.launch.host
    cmd = compile_command(arm, study, python, host, port or free_port(host), timeout_s)
    env = get_engine_kind("sglang").environment(arm)
    cache = cache_dir({**os.environ, **env})
    about = (
        f"DeepGEMM FP8 kernels for {study.model.id} (revision {study.model.revision},"
        f" quantization {study.model.quantization}), tp {tp_size(arm) or 1}, with arm"
        f" {arm.name}'s launch flags, in {python}; cache {cache}"
    )
    if print_only:
        print(f"# specbench engines warm sglang would compile {about}; nothing was run")
        problem = None if unset else environment_problem_cheap(python)
        if problem:
            print(f"# {problem}: the line is printed anyway")
        words = [f"{k}={quote(v, set(unset))}" for k, v in env.items()]
        print(" ".join(words + [quote(a, set(unset)) for a in cmd]))
        return 0
    if unset:
        raise InputError(
            f"{prereg}: environment variable {unset[0]} is not set (it names a path"
            " on this machine; set it before warming)"
        )
    problem = environment_problem(python)
    if problem:
        raise InputError(problem)
    return _run(cmd, {**os.environ, **env}, study, arm, cache, about, timeout_s)


def environment_problem_cheap(python: str) -> str | None:
    """For a printed line: only whether the interpreter exists (nothing is started)."""
    return None if Path(python).exists() else f"interpreter {python} does not exist"


def _run(
    cmd: list[str],
    env: dict[str, str],
    study: Study,
    arm: Arm,
    cache: Path,
    about: str,
    timeout_s: int,
) -> int:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    log = paths.CACHE_DIR / "deepgemm" / f"warm-{arm.name}-{stamp}.log"
    print(f"warming {about}", flush=True)
    print(f"log: {log} (SGLang's estimate for a cold compile: 10-20 min)", flush=True)
    start = time.monotonic()
    proc = spawn(cmd, env, log)
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - start
            if elapsed > timeout_s + SHUTDOWN_MARGIN_S:
                raise SpecbenchError(
                    f"DeepGEMM compile still running after {_minutes(elapsed)}"
                    " (SGLang's --timeout plus 10 min): stopped it",
                    f"log: {log}",
                )
            _sleep_until(proc, PROGRESS_EVERY_S)
            if proc.poll() is None:
                last = next((x for x in reversed(tail_lines(log, 5)) if x.strip()), "")
                print(
                    f"  {_minutes(time.monotonic() - start)}: compiling; log: {last[:160]}",
                    flush=True,
                )
    finally:
        if proc.poll() is None:
            stop_group(proc, 30)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise SpecbenchError(
            f"DeepGEMM compile failed (exit {proc.returncode}) after {_minutes(elapsed)}",
            f"log: {log}",
            *(f"  | {line}" for line in tail_lines(log, 20)),
        )
    marker = write_marker(study, arm, cache, elapsed)
    print(
        f"done in {_minutes(elapsed)}: the kernels are in {cache}; `specbench plan` now counts"
        f" no compile in the first SGLang start (record: {marker})",
        flush=True,
    )
    return 0


def _sleep_until(proc: subprocess.Popen, seconds: float) -> None:
    """Sleep up to `seconds`, returning as soon as the process ends."""
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(min(0.2, seconds))


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
