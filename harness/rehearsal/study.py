"""The rehearsal study: a registration's vLLM arms on the CPU build (arms.py) at a scale a
laptop runs, the registered bars, tasks and sessions kept, every cut a Difference; and
the study as a YAML file `specbench run` takes, its differences as comments."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.engines.launch.cpu_dtype import host_cpu_dtype
from harness.engines.launch.vllm_engine import VllmCpuKind
from harness.prereg.schema import Study
from harness.rehearsal.arms import cpu_arm
from harness.rehearsal.difference import Difference, merged

# The demo's (examples/cpu.yaml): a CPU step lasts 20-70 ms, so a client a step behind is
# 15 ms late, not 5; and a neighbour's CPU time on a shared host makes a cell invalid.
CPU_LAG_LIMIT_MS = 15.0
CPU_FOREIGN_CPU_LIMIT = 0.25


@dataclass(frozen=True)
class Scale:
    """How much of the registered work the rehearsal does (None: as registered)."""

    name: str
    bar_levels_only: bool  # the closed loop at the pass and stop bars' levels only
    speed_on_one_task: bool  # speed cells on the open loop's task (or the first) only
    sessions: int | None
    requests_min: int  # a closed-loop cell's measured requests: max(this, 1 per user)
    max_tokens: int
    subset: dict[str, int]  # per task kind; identity items are at most the subset
    identity_items: int
    open_loop_duration_s: float
    open_loop_rates: list[float] | None


FULL = Scale(
    "rehearsal",
    False,
    False,
    None,
    8,
    32,
    {"chat": 16, "gsm8k": 8, "humaneval": 4, "mmlu": 8, "speed_bench": 16},
    6,
    8.0,
    None,
)
# For the suite (and a first look, in minutes): the bars' levels, speed on one task, one
# session, a handful of prompts.
SMALL = Scale(
    "small",
    True,
    True,
    1,
    4,
    16,
    {"chat": 3, "gsm8k": 3, "humaneval": 2, "mmlu": 3, "speed_bench": 3},
    2,
    4.0,
    [1.0],
)


def rehearsal_study(
    study: Study, pair: Path, scale: Scale = FULL
) -> tuple[Study, list[Difference]]:
    """The CPU rehearsal of `study` (as written, before ${VAR} expansion) on the tiny
    pair in `pair`, and every difference from the registration."""
    diffs: list[Difference] = []
    hw = study.hardware
    diffs.append(
        Difference(
            "hardware",
            f"{hw.count} x {hw.gpu}",
            "this host's CPU, vLLM's CPU build",
            "it checks the machinery before the GPU day; its timings and verdict are the CPU's",
        )
    )
    arms = [a for a in (cpu_arm(arm, pair, diffs) for arm in study.arms) if a is not None]
    kept = {a["name"] for a in arms}
    for a in list(arms):  # a drafter whose baseline was not kept has nothing to compare with
        if a.get("baseline") and a["baseline"] not in kept:
            arms.remove(a)
            diffs.append(
                Difference(
                    "drafter arm",
                    f"compared with {a['baseline']}",
                    "not run",
                    "its baseline is not run here",
                    (a["name"],),
                )
            )
    if not any(a.get("drafter") for a in arms):
        raise ValueError("no vLLM drafter arm of this study can run on the CPU build")

    choice = host_cpu_dtype()
    diffs.append(
        Difference(
            "compute dtype",
            "the checkpoint's (FP8 weights, bfloat16 activations)",
            f"{choice.dtype} (launch.dtype cpu_native on {choice.isa})",
            choice.why,
        )
    )
    m = study.model
    model: dict[str, Any] = {
        "id": str(pair / "target"),
        "served_name": m.served_name or "tiny",
        "params_billion": 0.12,
        "weight_bytes_per_param": 2,
        "max_model_len": 1024,
    }
    if m.chat_template_kwargs:
        model["chat_template_kwargs"] = m.chat_template_kwargs
    diffs.append(
        Difference(
            "model",
            f"{m.id}@{m.revision or '(none)'}",
            f"the tiny target ({model['id']})",
            "built offline in seconds (`specbench tiny-model --pair`); its"
            " greedy output is its draft's, so drafters are accepted",
        )
    )
    if m.quantization:
        diffs.append(
            Difference(
                "model.quantization",
                m.quantization,
                "none",
                "the tiny target is bfloat16, served in the host's dtype"
                " (launch.dtype cpu_native): FP8 GEMMs are the GPU day's",
            )
        )
    if m.max_model_len and m.max_model_len > model["max_model_len"]:
        diffs.append(
            Difference(
                "model.max_model_len",
                str(m.max_model_len),
                str(model["max_model_len"]),
                "the tiny model's context",
            )
        )
    if m.chat_template_kwargs:
        diffs.append(
            Difference(
                "model.chat_template_kwargs",
                str(m.chat_template_kwargs),
                "sent as registered",
                "the tiny model's ChatML template has"
                " no thinking mode, so they change nothing here",
            )
        )

    data = study.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("surface", None)
    if study.surface is not None:
        diffs.append(
            Difference(
                "surface",
                f"control arms from {study.surface.drafter!r}",
                "not run",
                VllmCpuKind().synthetic_problem(study.arms[0]) or "",
            )
        )
    data.update(
        title=f"Rehearsal on vLLM's CPU build: {study.title}",
        model=model,
        arms=arms,
        hardware={
            "gpu": "none (CPU build of vLLM)",
            "count": 1,
            "memory_bandwidth_gb_s": 12,
            "dense_tflops": 0.15,
            "notes": "a CPU rehearsal; registered for " + hw.gpu,
        },
    )
    _scale_loads(data, study, scale, diffs)
    _scale_tasks(data, study, scale, diffs)
    _recording(data, study, len(arms), scale, diffs)
    data["plan_estimate"] = {**data.get("plan_estimate", {}), "engine_start_s": 45}
    return Study.model_validate(data), merged(diffs)


def _scale_loads(data: dict, study: Study, scale: Scale, diffs: list[Difference]) -> None:
    closed = data["loads"]["closed_loop"]
    registered = study.loads.closed_loop
    bars = study.bars
    levels = sorted(set(bars.pass_.speed.concurrencies) | set(bars.stop.concurrencies))
    if scale.bar_levels_only and levels != registered.concurrency:
        closed["concurrency"] = levels
        diffs.append(
            Difference(
                "loads.closed_loop.concurrency",
                str(registered.concurrency),
                str(levels),
                f"the {scale.name} scale: the pass and stop bars'"
                f" levels, so a knee above {levels[-1]} users is not located",
            )
        )
    requests = {"min": scale.requests_min, "per_user": 1}
    if registered.requests.model_dump() != requests:
        closed["requests"] = requests
        diffs.append(
            Difference(
                "loads.closed_loop.requests",
                str(registered.requests.model_dump()),
                str(requests),
                "a cell's requests, cut to laptop size",
            )
        )
    opened = study.loads.open_loop
    if opened is not None:
        loop = data["loads"]["open_loop"]
        loop["duration_s"] = scale.open_loop_duration_s
        loop.pop("requests", None)
        loop["warmup"] = min(opened.warmup, 2)
        if scale.open_loop_rates is not None:
            loop["rates_relative_to_knee"] = scale.open_loop_rates
        diffs.append(
            Difference(
                "loads.open_loop",
                f"{opened.duration_s or opened.requests}"
                f" {'s' if opened.duration_s else 'requests'} at"
                f" {opened.rates_relative_to_knee} x the knee",
                f"{scale.open_loop_duration_s:g} s at {loop['rates_relative_to_knee']}",
                "laptop size",
            )
        )


def _scale_tasks(data: dict, study: Study, scale: Scale, diffs: list[Difference]) -> None:
    speed = [t.name for t in study.tasks if "speed" in t.uses]
    keep = (study.loads.open_loop.task if study.loads.open_loop else speed[0]) if speed else None
    accuracy = study.bars.pass_.accuracy
    read = {keep, *(accuracy.tasks if accuracy is not None else [])}
    kept = []
    for task, written in zip(data["tasks"], study.tasks, strict=True):
        if scale.speed_on_one_task and written.name not in read:
            diffs.append(
                Difference(
                    f"task {written.name!r}",
                    str(written.uses),
                    "not run",
                    f"the {scale.name} scale: the speed task {keep!r} and the"
                    " accuracy bar's tasks only",
                )
            )
            continue
        kept.append(task)
        if scale.speed_on_one_task and "speed" in written.uses and written.name != keep:
            task["uses"] = [u for u in written.uses if u != "speed"]
            diffs.append(
                Difference(
                    f"task {written.name!r} uses",
                    str(written.uses),
                    str(task["uses"]),
                    f"the {scale.name} scale: speed cells on {keep!r} only",
                )
            )
        subset = min(written.subset or 10**9, scale.subset.get(written.kind, 8))
        task["subset"] = subset
        task["identity_items"] = min(written.identity_items, scale.identity_items, subset)
        task["max_tokens"] = min(written.max_tokens, scale.max_tokens)
        identity = "identity" in task["uses"]  # the items said only where they are used
        diffs.append(
            Difference(
                f"task {written.name!r}",
                f"max_tokens {written.max_tokens}, {written.subset or 'every'} item(s)"
                + (f", {written.identity_items} identity items" if identity else ""),
                f"max_tokens {task['max_tokens']}, {subset} items"
                + (f", {task['identity_items']} identity items" if identity else ""),
                "laptop size"
                + (
                    "; the tiny model answers nothing right, so accuracy shows the"
                    " machinery (drafted and plain outputs scored alike)"
                    if "accuracy" in written.uses
                    else ""
                ),
            )
        )
    data["tasks"] = kept


def _recording(data: dict, study: Study, arms: int, scale: Scale, diffs: list[Difference]) -> None:
    rec, registered = data["recording"], study.recording
    if registered.lag_limit_p99_ms < CPU_LAG_LIMIT_MS:
        rec["lag_limit_p99_ms"] = CPU_LAG_LIMIT_MS
        diffs.append(
            Difference(
                "recording.lag_limit_p99_ms",
                f"{registered.lag_limit_p99_ms:g}",
                f"{CPU_LAG_LIMIT_MS:g}",
                "the demo's: a CPU step lasts 20-70"
                " ms, against the GPU's few ms (examples/cpu.yaml)",
            )
        )
    if registered.host_foreign_cpu_limit is None:
        rec["host_foreign_cpu_limit"] = CPU_FOREIGN_CPU_LIMIT
        diffs.append(
            Difference(
                "recording.host_foreign_cpu_limit",
                "none",
                f"{CPU_FOREIGN_CPU_LIMIT:g}",
                "the client and every engine share"
                " the host's cores: a cell another program disturbed is"
                " measured again",
            )
        )
    if registered.engines_alive < arms:
        rec["engines_alive"] = arms
        diffs.append(
            Difference(
                "recording.engines_alive",
                str(registered.engines_alive),
                str(arms),
                "a GPU holds one engine; a CPU host holds them all,"
                " so each arm starts once per session",
            )
        )
    if scale.sessions is not None and scale.sessions < registered.sessions:
        rec["sessions"] = scale.sessions
        diffs.append(
            Difference(
                "recording.sessions",
                str(registered.sessions),
                str(scale.sessions),
                f"the {scale.name} scale: one session"
                " rests the intervals on one engine start (said per figure)",
            )
        )


def study_yaml(study: Study, diffs: list[Difference], source: Path) -> str:
    """The rehearsal study as a YAML file `specbench run` takes, its differences as comments."""
    head = [
        f"# Generated by `specbench rehearse {source}`: the registered study on vLLM's",
        "# CPU build. What differs from the GPU day, and why:",
    ]
    for d in diffs:
        head += [
            f"#  - {line}" if i == 0 else f"#    {line}"
            for i, line in enumerate(
                _wrap(d.sentence().removeprefix("rehearsal on the CPU build: "), 84)
            )
        ]
    body = yaml.safe_dump(
        study.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False, width=100
    )
    return "\n".join(head) + "\n" + body


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line] if line else lines
