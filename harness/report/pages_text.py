"""Text pages: the verdict with each bar's evidence, and the run's environment."""

from __future__ import annotations

import datetime
import json

import pandas as pd
from matplotlib.backends.backend_pdf import PdfPages

from harness.analysis.load import RunData
from harness.analysis.tables import Analysis
from harness.records import SmokeArmCheck, SmokeIdentityCheck
from harness.report.layout import new_page, save, table_lines, text_pages, wrap_lines
from harness.report.pages_quality import mismatch_where
from harness.run.smoke import smoke_line

VERDICT_COLOURS = {"PASS": "#1a7f37", "FAIL": "#c62828", "STOP": "#b26a00",
                   "INCOMPLETE": "#555555"}


def _wall(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def verdict_page(pdf: PdfPages, a: Analysis, verdict: dict) -> int:
    """The verdict, each bar's status and summary; evidence detail follows on text pages."""
    study = a.run.study
    fig = new_page(f"Verdict: {verdict['verdict']}", f"{study.title}  |  run {a.run.run_id}"
                   f"  |  seal {str(verdict.get('seal'))[:16]}...")
    fig.text(0.03, 0.86, verdict["verdict"], fontsize=40, fontweight="bold",
             color=VERDICT_COLOURS.get(verdict["verdict"], "black"), va="top")
    reasons = "; ".join(verdict.get("reasons") or []) or "every registered bar passes"
    # Below the verdict word, never beside it: a long word (INCOMPLETE) would overlap.
    fig.text(0.03, 0.775, "\n".join(wrap_lines([reasons], 140)[:2]), fontsize=9, va="top")
    lines: list[str] = []
    for bar in verdict["bars"]:
        lines.append(f"[{bar['status'].upper():>14}]  {bar['name']}")
        lines.extend(f"{'':18}{s}" for s in bar["summary"])
    lines.append("")
    lines.extend(smoke_summary(a.run))
    if verdict.get("excluded_cells"):
        lines.append("")
        lines.append("Excluded (invalid) cells, never used by a bar:")
        lines.extend(f"  {e['cell']}: {e['reason']}" for e in verdict["excluded_cells"])
    if verdict.get("skipped_cells"):
        lines.append("")
        lines.append(f"Skipped cells: {len(verdict['skipped_cells'])}"
                     f" ({verdict['skipped_cells'][0].get('reason')}); see the environment page.")
    shown = wrap_lines(lines, 140)
    fig.text(0.03, 0.70, "\n".join(shown[:40]), va="top", ha="left",
             fontdict={"family": "monospace", "size": 7.5}, linespacing=1.35)
    save(pdf, fig)
    pages = 1
    if len(shown) > 40:
        pages += text_pages(pdf, "Verdict (continued)", shown[40:])
    pages += text_pages(pdf, "Bar evidence", _evidence_lines(verdict),
                        "every figure each bar used, as written to verdict.json")
    return pages


def smoke_summary(run: RunData) -> list[str]:
    """The smoke stage in a few lines: off, passed for which arms, or where it stopped."""
    state = (run.manifest.get("smoke") or {}).get("status")
    if state == "off":
        return ["Smoke stage: off (the study registers recording.smoke: false)"]
    if not run.smoke:
        return ["Smoke stage: none recorded (a run folder from before the smoke stage)"]
    own: dict[str, SmokeArmCheck] = {}
    compared: dict[str, SmokeIdentityCheck] = {}
    for rec in run.smoke:  # the latest of each arm's checks decides
        if isinstance(rec, SmokeArmCheck):
            own[rec.arm] = rec
        else:
            compared[rec.arm] = rec
    failed = [r for r in [*own.values(), *compared.values()] if r.status == "failed"]
    if failed:
        worst = failed[-1]
        return [f"Smoke stage: FAILED at arm {worst.arm}: {worst.reason}",
                f"  engine log: {worst.log_line or '(nothing logged)'}"]
    arms = [a.name for a in run.study.arms]
    missing = [n for n in arms if n not in own or (
        not run.study.arm(n).is_baseline and n not in compared)]
    if missing:
        return [f"Smoke stage: incomplete, not checked: {', '.join(missing)}"]
    drafters = [n for n in arms if not run.study.arm(n).is_baseline]
    return [f"Smoke stage: passed for all {len(arms)} arms before the first cell: each started"
            " and answered 2 greedy prompts"
            + (f"; {', '.join(drafters)} moved their speculation counters and matched their"
               " baselines' text" if drafters else "")]


def _smoke_detail(run: RunData) -> list[str]:
    if not run.smoke:
        return smoke_summary(run)
    lines = smoke_summary(run) + ["  every check, in the order made (smoke/arms.jsonl):"]
    for rec in run.smoke:
        stamp = _wall(rec.started_wall if isinstance(rec, SmokeArmCheck) else rec.wall)
        lines.append(f"  {stamp}  {smoke_line(rec)}")
    return lines


def _evidence_lines(verdict: dict) -> list[str]:
    lines: list[str] = []
    for bar in verdict["bars"]:
        lines.append(f"== {bar['name']}: {bar['status']}")
        for key, value in bar["evidence"].items():
            if key == "tasks":
                for task, entry in value.items():
                    lines.append(f"  task {task}:")
                    lines.extend(_entry_lines(entry, "    "))
            else:
                lines.append(f"  {key}: {_short(value)}")
        lines.append("")
    return lines


def _entry_lines(entry: dict, pad: str) -> list[str]:
    out = []
    for key, value in entry.items():
        if key == "figures":
            out.append(f"{pad}figures:")
            for f in value:
                out.append(f"{pad}  c={f['concurrency']}: speedup {_num(f['speedup'])} "
                           f"[{_num(f['ci_lower'])}, {_num(f['ci_upper'])}]  "
                           f"{f['drafter_cell']} vs {f['baseline_cell']}"
                           + (f"  passes={f['passes']}" if "passes" in f else ""))
        elif key == "arms" and isinstance(value, dict):
            for arm, detail in value.items():
                d = {k: v for k, v in detail.items() if k != "mismatches"}
                out.append(f"{pad}{arm}: {_short(d)}")
                for m in detail.get("mismatches", [])[:5]:
                    out.append(f"{pad}  mismatch {m['item_id']}: {mismatch_where(m)}")
        else:
            out.append(f"{pad}{key}: {_short(value)}")
    return out


def _num(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _short(value, limit: int = 400) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + " ..."


def environment_pages(pdf: PdfPages, a: Analysis, verdict: dict) -> int:
    m = a.run.manifest
    study = a.run.study
    lines = [
        f"run id            {a.run.run_id}",
        f"seal              {m.get('seal')}",
        (f"study             {study.title} (registered {study.registered}; file"
        f" {m.get('study_file')})"),
        f"specbench commit  {m.get('specbench_commit')}",
        (f"status            {m.get('status')}   started {_wall(m.get('started_wall'))}"
        f"   ended {_wall(m.get('ended_wall'))}"),
        (f"hardware (study)  {study.hardware.count} x {study.hardware.gpu};"
        f" model {study.model.id}@{study.model.revision}"),
        "",
        "host:",
    ]
    lines += [f"  {k}: {_short(v, 200)}" for k, v in (m.get("host") or {}).items()]
    lines += ["", "engines (per arm, each start):"]
    for arm, infos in (m.get("engines") or {}).items():
        for info in infos:
            keys = ("kind", "version", "gpu", "started_wall", "started_for", "command")
            shown = {k: info.get(k) for k in keys if k in info}
            lines.append(f"  {arm}: {_short(shown, 300)}")
    lines += ["", *_smoke_detail(a.run)]
    lines += ["", "deviations from the registered study:"]
    devs = m.get("deviations") or []
    lines += [f"  {d.get('when')}: {d.get('what')} (seal {str(d.get('old_seal'))[:12]} ->"
              f" {str(d.get('new_seal'))[:12]})" for d in devs] or ["  none"]
    stop = m.get("stop")
    lines += ["", (f"stop bar at the end of stage 1: {_short(stop.get('fired')) if stop else '-'}"
              f" (judged {_wall(stop.get('judged_wall')) if stop else '-'})")]
    if stop and stop.get("fired"):
        lines.append("  the stop bar fired: the remaining speed cells were skipped;"
                     " identity and accuracy still ran")
    skipped = m.get("skipped") or []
    lines += ["", f"skipped cells ({len(skipped)}):"]
    lines += [f"  {s.get('cell')}: {s.get('reason')}" for s in skipped] or ["  none"]
    reruns = m.get("reruns") or []
    lines += ["", f"baseline reruns by the check bar ({len(reruns)}); both runs are kept:"]
    lines += [f"  {r.get('cell')} of {r.get('of')}: {r.get('reason')}" for r in reruns] \
        or ["  none"]
    for r in verdict.get("reruns") or []:
        lines.append(f"  {r['cell']}: {r['state']}"
                     + (f" ({r['relative_difference']:+.1%})" if "relative_difference" in r
                        else ""))
    failed = m.get("failed_cells") or []
    if failed:
        lines += ["", "cells that failed every attempt:"]
        lines += [f"  {f.get('cell')}: {f.get('reason')}" for f in failed]
    lines += ["", "cells:"]
    status = a.cells[a.cells["rerun_of"].isna()]["status"].value_counts().to_dict()
    lines.append("  " + ", ".join(f"{n} {s}" for s, n in status.items()))
    bad = a.cells[a.cells["status"].isin(["invalid", "missing"])]
    lines += table_lines(["cell", "status", "reason"],
                         [[r.cell_id, r.status, r.reason] for r in bad.itertuples()]) \
        if len(bad) else []
    lines += _burst_lines(a)
    return text_pages(pdf, "Environment, seal and deviations", lines)


def _burst_lines(a: Analysis) -> list[str]:
    """Per speed cell, the share of requests that arrived in bursts (no per-user speed)."""
    if "burst_share" not in a.cells:
        return []
    speed = a.cells[(a.cells["kind"] == "speed") & a.cells["burst_share"].notna()]
    if speed.empty:
        return []
    limit = a.run.study.recording.max_burst_share
    bound = speed.get("client_stamp_bound_p99_ms")
    rows = [[r.cell_id, r.status, f"{r.burst_share:.2f}",
             "" if bound is None or pd.isna(bound[i]) else f"{bound[i]:.1f}"]
            for i, r in zip(speed.index, speed.itertuples(), strict=True)]
    return ["", f"bursts: share of a speed cell's requests with most tokens under one stamp"
                f" (invalid above {limit:g}):",
            *table_lines(["cell", "status", "burst share", "stamp bound p99 ms"], rows)]
