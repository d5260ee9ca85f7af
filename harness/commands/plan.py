"""`specbench plan FILE`: the cells a run will execute, in order, with a GPU-time estimate."""

from __future__ import annotations

import argparse
from collections import Counter

from rich.console import Console

from harness.calibration import EffectiveHardware, effective_hardware
from harness.commands.output import add_format_option, print_json, write_table
from harness.errors import InputError
from harness.plan import engine_blocks, estimate, plan_cells
from harness.plan_arms import schedule_arms, surface_arms
from harness.prereg import load_study_file
from harness.prereg.schema import Study
from harness.rundir.cell import Stage
from harness.shards import sharded_estimate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="list the cells of a study in run order, with an estimate")
    p.add_argument("file", help="the study's prereg YAML")
    p.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="also show the shards for N GPUs (`run --gpus N`) and the wall-clock"
        " estimate on 1, 2, 4, 8 and N GPUs",
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="measure bandwidth and FLOP rate here first (as `specbench calibrate"
        " FILE`) and estimate on them; the registered figures otherwise",
    )
    add_format_option(p)
    p.set_defaults(func=run)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _sharding(study, cells, gpus: int) -> dict:
    """The shards for `gpus` GPUs and the estimate on 1, 2, 4, 8 and `gpus`."""
    mine = sharded_estimate(study, cells, gpus)
    counts = sorted({1, 2, 4, 8, gpus})
    return {
        "gpus": gpus,
        "shards": [
            {
                **s.to_dict(),
                "label": s.label,
                "cells": sum(1 for c in cells if s.holds(c)),
                "estimated_s": {f"stage {k}": v for k, v in mine.per_shard[s.name].items()},
            }
            for s in mine.shards
        ],
        "by_gpus": [
            {
                "gpus": e.gpus,
                "shards": len(e.shards),
                "wall_s": e.wall_s,
                "busy_gpu_s": e.busy_gpu_s,
            }
            for e in (
                sharded_estimate(study, cells, n) for n in counts if n >= study.hardware.count
            )
        ],
    }


def _print_sharding(console: Console, sharding: dict, per_engine: int) -> None:
    gpus = sharding["gpus"]
    console.print(
        f"[bold]{len(sharding['shards'])} shards on {gpus} GPUs[/bold]"
        f" ({per_engine} per engine); each holds whole engine groups (a baseline"
        " and its drafters) on some tasks, so every speedup's two cells share a GPU:"
    )
    write_table(
        ["shard", "arms on tasks", "cells", *(f"stage {k}" for k in Stage)],
        [
            [
                s["name"],
                s["label"],
                s["cells"],
                *(_hours(s["estimated_s"][f"stage {k}"]) for k in Stage),
            ]
            for s in sharding["shards"]
        ],
        "table",
        right=("cells",),
    )
    console.print(
        "wall clock: each stage lasts as long as its slowest shard (the stop bar"
        " waits for all of stage 1)"
    )
    write_table(
        ["GPUs", "shards", "wall clock", "GPU time busy"],
        [
            [e["gpus"], e["shards"], _hours(e["wall_s"]), _hours(e["busy_gpu_s"])]
            for e in sharding["by_gpus"]
        ],
        "table",
        right=("GPUs", "shards"),
    )


def _calibrated(study: Study) -> EffectiveHardware:
    """The roofline's inputs measured here (the registered ones, with why, if that fails);
    the shards' estimate keeps the registered figures, so a plan's cut never depends on a
    measurement."""
    from harness.run.calibrate import calibrate_study

    return effective_hardware(study, calibrate_study(study))


def _surface_estimate(study: Study, cells: list, hardware: EffectiveHardware | None) -> dict:
    """The surface stage's share of the plan: its cells and their GPU time apart."""
    assert study.surface is not None
    mine = [c for c in cells if c.stage == Stage.SURFACE]
    verify = [c for c in cells if c.stage == Stage.SCHEDULE]
    # Its cells and engine starts; no smoke: its arms are not smoked. The verification
    # is costed at the drafter's own k (its schedule is not known before stage 4).
    est = estimate(study, mine, hardware, smoke=False) if mine else None
    est_verify = estimate(study, verify, hardware, smoke=False) if verify else None
    return {
        "drafter": study.surface.drafter,
        "k": study.surface.k,
        "acceptance_length": study.surface.acceptance_length,
        "concurrency": study.surface.concurrency,
        "tasks": study.surface_tasks(),
        "arms": len(surface_arms(study)),
        "cells": len(mine),
        "estimated_gpu_seconds": est.seconds if est else 0.0,
        "verify_schedule": {
            "arms": len(schedule_arms(study)),
            "cells": len(verify),
            "estimated_gpu_seconds": est_verify.seconds if est_verify else 0.0,
        },
    }


MEASURE_COSTS = (
    "flock /tmp/specbench-heavy.lock nice -n 19 .venv/bin/python"
    " benchmarks/sequential_design.py --study {} --write"
)


def _designs(
    study: Study, cells: list, most: float, hardware: EffectiveHardware | None, study_file: str
) -> dict:
    """Both designs' GPU time: at most `most` (every cell), and expected at the registered
    assumed acceptance where benchmarks/sequential_design.py measured the chances."""
    from harness.analysis.design import look_levels
    from harness.analysis.intervals import t_quantile
    from harness.plan import expected_seconds
    from harness.prereg.operating import sequential_counterpart, stored_costs
    from harness.prereg.schema import design_problems

    seq = sequential_counterpart(study)
    iv, n = study.bars.intervals, study.recording.sessions
    record = stored_costs(study)
    figures = hardware.used if hardware is not None else None
    out: dict = {
        "registered": study.design.kind,
        "provenance": record and record["provenance"],
        "measure": MEASURE_COSTS.format(study_file),
        "designs": {},
        "stage_2_looks": any(c.session and c.stage == Stage.REST for c in cells),
    }
    for name in ("fixed", "group_sequential"):
        entry: dict = {"max_s": most, "expected_s": None}
        if name == "group_sequential":
            if problems := design_problems(seq, n, iv.method, iv.pooling):
                out["designs"][name] = entry | {"refused": problems[0][1]}
                continue
            levels = look_levels(study.model_copy(update={"design": seq}))
            entry["looks"] = [
                {"sessions": k, "level": v, "t": t_quantile(v, k - 1)} for k, v in levels.items()
            ]
            entry["spending"] = seq.spending
        if record is not None:
            p = record["designs"][name]
            entry["expected_s"] = expected_seconds(
                study, cells, most, p["p_cell"], p["p_block"], figures
            )
        out["designs"][name] = entry
    return out


def _print_designs(console: Console, d: dict) -> None:
    pv = d["provenance"]
    source = (
        f"expected at the registered assumed acceptance and the lab's session variation:"
        f" {pv['reps']} simulated runs of {pv['benchmark']} at {pv['commit']}"
        f"{' with uncommitted changes' * pv['dirty']}, {pv['date']}"
        if pv
        else f"expected: not simulated for this study (`{d['measure']}`)"
    )
    console.print(f"GPU time by design (the plan's roofline; {source}):", markup=False)
    for name, e in d["designs"].items():
        mark = " (registered)" if name == d["registered"] else ""
        if "refused" in e:
            console.print(f"  {name}: not possible here: {e['refused']}", markup=False)
            continue
        hours = f"expected {e['expected_s'] / 3600:.2f} h, " if e["expected_s"] is not None else ""
        looks = (
            "; looks after sessions "
            + ", ".join(
                f"{x['sessions']} (repeated {x['level']:.2%} intervals, t {x['t']:.1f} on"
                f" {x['sessions'] - 1} df)"
                for x in e["looks"]
            )
            + f", {e['spending']} spending"
            if "looks" in e
            else "; the bars read once, after the last session"
        )
        console.print(
            f"  {name}{mark}: {hours}at most {e['max_s'] / 3600:.2f} h{looks}", markup=False
        )
    if "looks" in d["designs"]["group_sequential"]:
        later = (
            ", the check and the knee at stage 1's and stage 2's"
            if d["stage_2_looks"]
            else ", the check and the knee too"
        )
        console.print(
            f"  group_sequential: pass.speed and stop may be decided at stage 1's"
            f" looks{later}; a bar still open at the last look is read on the point"
            " estimates, as fixed reads it",
            markup=False,
        )


def run(args: argparse.Namespace) -> int:
    study = load_study_file(args.file).study
    cells = plan_cells(study)
    gpus = getattr(args, "gpus", None)
    if gpus is not None and gpus < 1:
        raise InputError(f"--gpus {gpus}: expected a whole number of GPUs, at least 1")
    sharding = _sharding(study, cells, gpus) if gpus is not None else None
    sessions = study.recording.sessions
    headers = [
        "#",
        "stage",
        *(["session"] if sessions > 1 else []),
        "arm",
        "task",
        "cell",
        "load",
        "requests",
        "warmup",
    ]
    rows = [
        [
            i,
            cell.stage,
            *([cell.session or ""] if sessions > 1 else []),
            cell.arm,
            cell.task,
            cell.kind,
            cell.load_label,
            cell.requests if cell.requests is not None else "by duration",
            cell.warmup,
        ]
        for i, cell in enumerate(cells, 1)
    ]
    fmt = getattr(args, "format", "table")
    if fmt == "csv":
        write_table(headers, rows, fmt)
        return 0
    hardware = _calibrated(study) if getattr(args, "calibrate", False) else None
    est = estimate(study, cells, hardware)
    designs = _designs(study, cells, est.seconds, hardware, args.file)
    if fmt == "json":
        print_json(
            {
                "cells": [dict(zip(headers, r, strict=True)) for r in rows],
                "estimated_gpu_seconds": est.seconds,
                "assumptions": est.assumptions,
                "designs": designs,
                **({"roofline_inputs": hardware.line()} if hardware else {}),
                "smoke": bool(study.recording.smoke and cells),
                "control_arms": study.control_arms(),
                **(
                    {"surface": _surface_estimate(study, cells, hardware)}
                    if study.surface is not None
                    else {}
                ),
                **({"sharding": sharding} if sharding else {}),
            }
        )
        return 0
    # soft_wrap: lines are never broken at the terminal's (or a pipe's 80) columns.
    console = Console(highlight=False, soft_wrap=True)
    write_table(headers, rows, fmt, right=("#", "stage", "requests", "warmup"))
    kinds = Counter(c.kind for c in cells)
    total_requests = sum((c.requests or 0) + c.warmup for c in cells)
    console.print(
        f"{len(cells)} cells: "
        + ", ".join(f"{n} {k}" for k, n in kinds.items())
        + f"; {total_requests} requests (open-loop cells sized at run time not counted)"
    )
    if study.recording.smoke and cells:
        console.print(
            f"before stage 1 the smoke stage starts each of the {len(study.arms)} arms once"
            " (two greedy prompts; drafters must move their speculation counters and match"
            f" their baselines), ending on {cells[0].arm}, whose engine serves the first cell."
        )
        floors = [
            f"{a.name} >= {a.drafter.expect.acceptance_length_min:g}"
            for a in study.arms
            if a.drafter and a.drafter.expect and a.drafter.expect.acceptance_length_min
        ]
        if floors:
            console.print(
                "acceptance floors checked there (tokens per round at one user): "
                + ", ".join(floors)
            )
    else:
        console.print("no smoke stage (the study registers recording.smoke: false)")
    for control in study.control_arms():
        console.print(f"control arm {control['line']}", markup=False)
    if study.surface is not None:
        s = _surface_estimate(study, cells, hardware)
        console.print(
            f"round-cost surface (stage 4, after the registered stages; read by no"
            f" bar): {s['arms']} control arms of {s['drafter']} (k {s['k']}, acceptance"
            f" length {s['acceptance_length']}) at concurrency {s['concurrency']} on"
            f" {', '.join(s['tasks'])}: {s['cells']} cells, estimated"
            f" {_hours(s['estimated_gpu_seconds'])} of the GPU time below",
            markup=False,
        )
        if (v := s["verify_schedule"])["cells"]:
            console.print(
                f"k schedule verification (stage 5, after the surface; read by no"
                f" bar): {v['arms']} arm{'s' if v['arms'] != 1 else ''} of {s['drafter']} running the"
                f" schedule"
                f" the surface proposes, at every registered level: {v['cells']}"
                f" cells, estimated {_hours(v['estimated_gpu_seconds'])} (at the"
                " drafter's own k)",
                markup=False,
            )
    console.print(
        "stage 1 runs every arm's identity cells and speed cells at concurrency "
        f"{study.bars.stop.concurrencies} first; the stop bar is judged before stage 2."
    )
    if sessions > 1:
        repeated = [c for c in cells if c.session is not None]
        console.print(
            f"{len(repeated) // sessions} cells ({study.recording.sessions_for}) are measured in"
            f" {sessions} sessions each, every session a fresh engine start, arms interleaved"
            " (baseline, drafter, drafter, baseline, ...): "
            f"{len(engine_blocks(cells))} engine starts for the cells."
        )
    console.print(
        f"[bold]estimated GPU time: {_hours(est.seconds)}[/bold] (an estimate, not a"
        " measurement; roofline assumptions:)"
    )
    if hardware is not None and hardware.measured is None:  # why the registered ones
        console.print(f"  - {hardware.line()}", markup=False)
    for line in est.assumptions:
        console.print(f"  - {line}")
    _print_designs(console, designs)
    if sharding is not None:
        _print_sharding(console, sharding, study.hardware.count)
    return 0
