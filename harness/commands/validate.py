"""`specbench validate FILE`: check a pre-registration and print its seal."""

from __future__ import annotations

import argparse
import functools

from rich.console import Console

from harness.commands.output import add_format_option, print_json, write_table
from harness.errors import InputError
from harness.prereg import LoadedStudy, load_study_file, seal_of
from harness.prereg.drafter_base import base_line, check_drafter_bases
from harness.prereg.load import format_loc
from harness.prereg.operating import design_warnings
from harness.prereg.pins import TO_FIX_MARKER, pin_report
from harness.prereg.schema import Study
from harness.weights.datasets import dataset_problems


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a prereg file and print its summary and seal")
    p.add_argument("file", help="the study's prereg YAML")
    add_format_option(p)
    p.set_defaults(func=run)


ARM_COLUMNS = ["arm", "engine", "drafter", "k", "baseline", "start"]


def arm_rows(study: Study) -> list[list[object]]:
    rows: list[list[object]] = []
    for arm in study.arms:
        d = arm.drafter
        start = "attach " + arm.attach.base_url if arm.attach else "launch"
        rows.append(
            [
                arm.name,
                arm.engine,
                f"{d.method} {d.model or ''}".strip() if d else "none",
                d.num_draft_tokens if d else "-",
                arm.baseline or "(baseline)",
                start,
            ]
        )
    return rows


def run(args: argparse.Namespace) -> int:
    loaded = load_study_file(args.file)
    study = loaded.study
    # The seal hashes a hub-cache dataset's files: absent, the study cannot be sealed.
    missing = dataset_problems(study, loaded)
    if missing:
        raise InputError(*missing)
    task_lines = check_prompts(loaded)
    seal = seal_of(study)
    fmt = getattr(args, "format", "table")
    if fmt != "table":
        checks = check_drafter_bases(loaded)
        problems = [c.problem for c in checks if c.problem]
        if problems:
            raise InputError(*problems)
        if fmt == "csv":
            write_table(ARM_COLUMNS, arm_rows(study), fmt)
        else:
            report = pin_report(loaded)
            print_json(
                {
                    "title": study.title,
                    "seal": seal,
                    "warnings": design_warnings(study),
                    "arms": [dict(zip(ARM_COLUMNS, r, strict=True)) for r in arm_rows(study)],
                    "unpinned": [f"{c.where}: {c.repo}" for c in report.unpinned],
                    "open_markers": [f"{m.file}:{m.line}: {m.text}" for m in report.markers],
                    "drafter_bases": [base_line(c).strip() for c in checks],
                }
            )
        return 0
    # soft_wrap: lines are never broken at the terminal's (or a pipe's 80) columns.
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]{study.title}[/bold]  (registered {study.registered})")
    console.print(
        f"model {study.model.id}@{study.model.revision or '-'}"
        f"  on {study.hardware.count} x {study.hardware.gpu}"
    )
    write_table(ARM_COLUMNS, arm_rows(study), fmt, right=("k",), title="arms")
    closed = study.loads.closed_loop
    console.print(
        f"closed loop: concurrency {closed.concurrency}; requests per cell"
        f" max({closed.requests.min}, {closed.requests.per_user} x c); warm-up"
        f" {closed.warmup_per_user} per user"
    )
    if study.loads.open_loop:
        ol = study.loads.open_loop
        console.print(
            f"open loop: {ol.arrival} arrivals on {ol.task} at {ol.rates_relative_to_knee} x knee"
        )
    tasks = ", ".join(
        f"{t.name} ({t.kind}, {'/'.join(t.uses)}, max_tokens {t.max_tokens}"
        + (f", {t.config}@{t.revision[:12]}" if t.config and t.revision else "")
        + (f", categories {'/'.join(t.categories)}" if t.categories else "")
        + (f", subset {t.subset}" if t.subset else "")
        + ")"
        for t in study.tasks
    )
    console.print(f"tasks: {tasks}")
    for line in task_lines:
        console.print(line, markup=False)
    b = study.bars
    sp = b.pass_.speed
    spread = " or the sessions' spread" if b.check.agreement == "session_spread" else ""
    console.print(
        f"bars: pass speedup >= {sp.threshold:g} at c in {sp.concurrencies} ({sp.statistic},"
        f" best drafter {sp.best_drafter}, {sp.require});"
        f" stop < {b.stop.threshold:g} at c in {b.stop.concurrencies} ({b.stop.fires_when});"
        f" check > {b.check.threshold:g} -> {b.check.action} (agree within"
        f" {b.check.agree_within:.0%}"
        f"{spread})"
    )
    if study.design.kind != "fixed":
        from harness.analysis.design import look_levels

        console.print(
            f"design: {study.design.kind}, looks after sessions "
            + ", ".join(f"{k} ({v:.2%})" for k, v in look_levels(study).items())
            + f" of {study.recording.sessions}, {study.design.spending} spending",
            markup=False,
        )
    if loaded.arm_files:
        console.print("arm files: " + ", ".join(str(p) for p in loaded.arm_files.values()))
    print_pins(console, loaded)
    checks = check_drafter_bases(loaded)
    if checks:
        console.print("drafter bases (what each checkpoint was trained against):", soft_wrap=True)
        for check in checks:
            console.print(base_line(check), soft_wrap=True, markup=False)
    problems = [c.problem for c in checks if c.problem]
    if problems:
        raise InputError(*problems)
    for warning in design_warnings(study):
        console.print(f"warning: {warning}", markup=False)
    print(f"seal: {seal}")
    return 0


def check_prompts(loaded: LoadedStudy) -> list[str]:
    """What the tasks' prompts hold (harness/workloads/fit.py): SPEED-Bench placeholder
    rows by category, and every prompt plus max_tokens against the model's context. A
    problem is an InputError naming the file and line of the field it is about."""
    from harness.workloads.fit import context_report, placeholder_report

    lines, problems = placeholder_report(loaded.study)
    refused = {loaded.study.tasks[loc[1]].name for loc, _ in problems}
    more_lines, more = context_report(loaded.study, skip=refused)
    if problems + more:
        raise InputError(
            *(
                f"{w.file}:{w.line}: {format_loc(loc)}: {message}"
                for loc, message in problems + more
                for w in [loaded.where(loc)]
            )
        )
    return lines + more_lines


def print_pins(console: Console, loaded: LoadedStudy) -> None:
    """Every unpinned revision and open marker, with file and line, and what `run` does."""
    report = pin_report(loaded)
    out = functools.partial(console.print, soft_wrap=True)  # one line each, never wrapped
    pinned = [c for c in report.checkpoints if c.pinned]
    out(
        f"checkpoints: {len(report.checkpoints)} on the hub, {len(pinned)} pinned"
        + "".join(f"; {', '.join(c.roles)} {c.label}" for c in pinned)
    )
    out(f"unpinned revisions: {len(report.unpinned)}")
    for c in report.unpinned:
        out(f"  {c.where}: {', '.join(c.roles)} {c.repo}: {c.why_unpinned()}")
    out(f"open {TO_FIX_MARKER!r} markers: {len(report.markers)}")
    for m in report.markers:
        out(f"  {m.file}:{m.line}: {m.text}")
    if not report.open:
        return
    if report.gpu:
        out(
            f"[bold]`specbench run` refuses this study[/bold] (it runs on"
            f" {', '.join(report.gpu_engines)}: a GPU study) until these are fixed,"
            " unless --allow-unpinned, which records the deviation"
        )
    else:
        out("no arm runs on a GPU engine (vllm, sglang): `specbench run` runs it as is")
