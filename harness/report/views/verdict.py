"""What the verdict section shows (page one and the two text pages after it): the verdict
word, its reasons and each bar's status, the notice a reader must not miss, the headline
speedup panels, each bar's summary and evidence; and the run-record lines it shares with
the environment section (views/environment.py): deviations, checkpoints, the smoke and
the regime."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass

from harness.analysis.bar_common import speed_tasks
from harness.analysis.load import RunData
from harness.analysis.regime import regime_lines
from harness.analysis.smoke import compares, smoke_line
from harness.analysis.tables import Analysis
from harness.engines.launch.chosen_settings import differences
from harness.numbers import number_text
from harness.prereg.operating import operating_lines
from harness.records import SmokeArmCheck, SmokeIdentityCheck
from harness.report.views.identity import mismatch_where
from harness.report.views.speedups import SpeedupPanel, build_speedup_panel
from harness.rundir.manifest import Manifest
from harness.rundir.verdict import Verdict


def wall_clock(t: float | str | None) -> str:
    if t is None:
        return "-"
    if not isinstance(t, int | float):
        return str(t)  # already a date as text
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


HEADLINE_TASKS = 3  # panels on page one; further tasks are in the speedup section
VERDICT_COLOURS = {"PASS": "#1a7f37", "FAIL": "#c62828", "STOP": "#b26a00", "INCOMPLETE": "#555555"}


@dataclass(frozen=True)
class VerdictView:
    title: str
    about: list[str]  # the study, the run, the seal: the subtitle's parts
    word: str
    colour: str
    reasons: list[str]  # one a reason, whole
    statuses: list[tuple[str, str]]  # each bar's name and status
    notice: list[str]  # the host's regime and the deviations
    panels: list[SpeedupPanel]  # the first speed tasks' speedups and factors
    bar_lines: list[str]
    evidence_lines: list[str]


def build_verdict_view(a: Analysis, v: Verdict) -> VerdictView:
    return VerdictView(
        f"Verdict: {v.verdict}",
        [a.run.study.title, f"run {a.run.run_id}", f"seal {str(v.seal)[:16]}..."],
        v.verdict,
        VERDICT_COLOURS.get(v.verdict, "black"),
        list(v.reasons) or ["every registered bar passes"],
        [(b.name, b.status) for b in v.bars],
        verdict_notice(a),
        [build_speedup_panel(a, task) for task in speed_tasks(a.run.study)[:HEADLINE_TASKS]],
        bar_lines(a, v),
        evidence_lines(v),
    )


def verdict_notice(a: Analysis) -> list[str]:
    """What page one shows beside the verdict: the host's regime (a compute-bound host
    explains a STOP) and the recorded deviations."""
    deviations = deviation_lines(a.run.manifest)
    notice = (
        ["Deviations from the registered study (manifest.json):", *deviations] if deviations else []
    )
    return [*regime_summary(a.run.manifest), *notice]


def bar_lines(a: Analysis, verdict: Verdict) -> list[str]:
    """Each bar's status and summary, the smoke, deviations and what else a verdict rests on."""
    deviations = deviation_lines(a.run.manifest)
    regime = regime_summary(a.run.manifest)
    lines: list[str] = []
    for bar in verdict.bars:
        lines.append(f"[{bar.status.upper():>14}]  {bar.name}")
        lines.extend(f"{'':18}{s}" for s in bar.summary)
    lines.append("")
    # How often each bar is right on this design (harness/prereg/operating.py).
    lines.extend([*operating_lines(a.run.study, a.run.manifest.study_file or "prereg.yaml"), ""])
    if verdict.design is not None:  # the looks of a group-sequential design
        lines.extend([*verdict.design.lines, ""])
    lines.extend(smoke_summary(a.run))
    lines.extend(engine_choice_lines(a.run))
    lines.extend(regime)
    lines.extend(trained_against_lines(a))
    lines.extend(control_arm_lines(a))
    lines.extend(surface_lines(verdict))
    lines.extend(stops_paying_lines(verdict))
    lines.extend(decomposition_flag_lines(a))
    if verdict.unfinished is not None:
        lines += ["", "Why the run is unfinished, and how to finish it:"]
        lines += [f"  {line}" for line in verdict.unfinished.lines]
    if verdict.excluded_cells:
        lines.append("")
        lines.append("Excluded (invalid) cells, never used by a bar:")
        lines.extend(f"  {e.cell}: {e.reason}" for e in verdict.excluded_cells)
    if verdict.remeasured:
        lines += [
            "",
            "Cells measured again after they ended invalid (--remeasure-invalid;"
            " every earlier attempt kept):",
        ]
        lines += [f"  {r.line}" for r in verdict.remeasured]
    if deviations:
        lines.append("")
        lines.append("Deviations from the registered study (manifest.json):")
        lines.extend(deviations)
    if verdict.gpu_throttled_cells:
        lines.append("")
        used = (
            "remeasure: timed cells measured again, invalid if still throttled"
            if verdict.gpu_throttle_policy == "remeasure"
            else "flag: flagged only"
        )
        lines.append(f"Cells measured while the GPU throttled (recording.gpu_throttle: {used}):")
        lines.extend(f"  {e.cell} ({e.status}): {e.summary}" for e in verdict.gpu_throttled_cells)
    if verdict.skipped_cells:
        lines.append("")
        lines.append(
            f"Skipped cells: {len(verdict.skipped_cells)}"
            f" ({verdict.skipped_cells[0].reason}); see the environment page."
        )
    return lines


def trained_against_lines(a: Analysis) -> list[str]:
    """Drafters registered as trained against another base than the target."""
    named = [
        (arm.name, arm.drafter.trained_against)
        for arm in a.run.study.arms
        if arm.drafter is not None and arm.drafter.trained_against
    ]
    if not named:
        return []
    return [
        "",
        f"Drafters trained against another base than the target {a.run.study.model.id}"
        " (drafter.trained_against):",
    ] + [f"  {arm}: {base}" for arm, base in named]


def control_arm_lines(a: Analysis) -> list[str]:
    """Control arms (drafter.synthetic): their speeds are in the tables, no bar read them."""
    controls = a.run.study.control_arms()
    if not controls:
        return []
    return ["", "Control arms (synthetic acceptance; never judged):"] + [
        f"  {c['line']}" for c in controls
    ]


def surface_lines(verdict: Verdict) -> list[str]:
    """The round-cost surface in a few lines (its page has the figures); read by no bar."""
    s = verdict.surface
    if s is None:
        return []
    out = ["", f"Round-cost surface ({s.drafter}'s engine at set acceptance; read by no bar):"]
    out += [f"  {p.arm} / {p.task} c={p.concurrency}: {p.label}" for p in s.placements]
    out += [f"  {line}" for line in s.loss_of_gain]
    out += [
        f"  k schedule for {s.drafter} / {r.task} c={r.concurrency}: {r.label}" for r in s.schedule
    ]
    out += [
        f"  as {task}'s engine setting: {setting}" for task, setting in s.schedule_settings.items()
    ]
    out += [f"  k schedule verified, {r.task}: {r.label}" for r in s.verification]
    return out


def stops_paying_lines(verdict: Verdict) -> list[str]:
    rows = verdict.speculation_pays
    if not rows:
        return []
    out = [
        "",
        "Where speculation pays (lower bound above 1.0) and where its gain is gone (upper"
        " bound below 1.0), and the engine setting that would gate it there:",
    ]
    for r in rows:
        out.append(f"  {r.arm} / {r.task}: {r.label}")
        if r.gate:
            out.append(f"    {r.gate}")
    return out


def decomposition_flag_lines(a: Analysis) -> list[str]:
    flagged = [r for r in a.speedups_of() if r.decomposition_flag is True]
    if not flagged:
        return []
    tol = a.run.study.bars.decomposition.tolerance
    out = [
        "",
        f"Speedups their two factors explain to worse than {tol:.0%}"
        " (bars.decomposition.tolerance):",
    ]
    out.extend(f"  {r.arm}/{r.task} c={r.concurrency}: {r.decomposition_note}" for r in flagged)
    return out


def deviation_lines(manifest: Manifest) -> list[str]:
    """One line per recorded deviation, then what it let through (unpinned revisions,
    open markers), for the verdict page: a reader must not miss them."""
    lines: list[str] = []
    for d in manifest.deviations:
        seal = f" (seal {d.old_seal[:12]} -> {str(d.new_seal)[:12]})" if d.old_seal else ""
        lines.append(f"  {wall_clock(d.when)}: {d.what}{seal}")
        for u in d.unpinned or []:
            lines.append(
                f"    unpinned: {', '.join(u.get('roles') or [])} {u.get('checkpoint')}"
                f" at revision {u.get('revision') or '(none)'} ({u.get('where')})"
            )
        for m in d.open_markers or []:
            lines.append(f"    open marker: {m}")
    return lines


def checkpoint_lines(manifest: Manifest) -> list[str]:
    lines = []
    for c in manifest.checkpoints or []:
        name = c.repo or c.path
        at = f"@{c.revision} commit {c.commit}" if c.source == "hub" else ""
        lines.append(f"  {', '.join(c.roles)}: {name}{at}")
        lines.extend(f"    sha256 {w.sha256}  {w.file}" for w in c.weights)
        if c.note:
            lines.append(f"    {c.note}")
    return lines or ["  none recorded"]


def regime_summary(manifest: Manifest) -> list[str]:
    """One line per baseline timed in the smoke (harness/run/regime.py)."""
    return regime_lines(list(manifest.regime.values()))


def smoke_summary(run: RunData) -> list[str]:
    """The smoke stage in a few lines: off, passed for which arms, or where it stopped."""
    state = run.manifest.smoke.status if run.manifest.smoke else None
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
    latest: list[SmokeArmCheck | SmokeIdentityCheck] = [*own.values(), *compared.values()]
    failed = [r for r in latest if r.status == "failed"]
    if failed:
        worst = failed[-1]
        return [
            f"Smoke stage: FAILED at arm {worst.arm}: {worst.reason}",
            f"  engine log: {worst.log_line or '(nothing logged)'}",
        ]
    arms = [a.name for a in run.study.arms]
    missing = [
        n for n in arms if n not in own or (compares(run.study.arm(n)) and n not in compared)
    ]
    if missing:
        return [f"Smoke stage: incomplete, not checked: {', '.join(missing)}"]
    drafters = [n for n in arms if compares(run.study.arm(n))]
    ties = [smoke_line(c) for c in compared.values() if c.near_ties]
    return [
        f"Smoke stage: passed for all {len(arms)} arms before the first cell: each started"
        " and answered 2 greedy prompts"
        + (
            f"; {', '.join(drafters)} moved their speculation counters and matched their"
            " baselines' text" + (" (up to near-ties of the target's, below)" if ties else "")
            if drafters
            else ""
        )
    ] + [f"  {line}" for line in ties]


def smoke_detail(run: RunData) -> list[str]:
    if not run.smoke:
        return smoke_summary(run)
    lines = smoke_summary(run) + ["  every check, in the order made (smoke/arms.jsonl):"]
    for rec in run.smoke:
        stamp = wall_clock(rec.started_wall if isinstance(rec, SmokeArmCheck) else rec.wall)
        lines.append(f"  {stamp}  {smoke_line(rec)}")
    return lines


def engine_choice_lines(run: RunData) -> list[str]:
    """Each setting an engine chose by itself that differs between a drafter and its
    baseline, from their last engine starts (a speedup measures that choice too)."""
    engines = run.manifest.engines

    def last(name: str) -> dict[str, str]:
        started = engines.get(name, [])
        return started[-1].settings if started else {}

    lines = []
    for arm in run.study.arms:
        if arm.baseline is None or not (last(arm.name) and last(arm.baseline)):
            continue
        lines += [
            f"Engine setting differs: {arm.name} vs {arm.baseline}: {d}"
            for d in differences(last(arm.name), last(arm.baseline))
        ]
    return lines


def evidence_lines(verdict: Verdict) -> list[str]:
    lines: list[str] = []
    for bar in verdict.bars:
        lines.append(f"== {bar.name}: {bar.status}")
        for key, value in bar.evidence.items():
            if key == "tasks":
                for task, entry in value.items():
                    lines.append(f"  task {task}:")
                    lines.extend(_entry_lines(entry, "    "))
            else:
                lines.append(f"  {key}: {short_json(value)}")
        lines.append("")
    return lines


def _entry_lines(entry: dict, pad: str) -> list[str]:
    out = []
    for key, value in entry.items():
        if key == "figures":
            out.append(f"{pad}figures:")
            for f in value:
                out.append(
                    f"{pad}  c={f['concurrency']}: speedup {number_text(f['speedup'], '.3f')} "
                    f"[{number_text(f['ci_lower'], '.3f')}, {number_text(f['ci_upper'], '.3f')}]  "
                    f"{f['drafter_cell']} vs {f['baseline_cell']}"
                    + (f"  passes={f['passes']}" if "passes" in f else "")
                    + (
                        f"  GPU THROTTLED: {', '.join(f['gpu_throttled'])}"
                        if f.get("gpu_throttled")
                        else ""
                    )
                )
        elif key == "arms" and isinstance(value, dict):
            for arm, detail in value.items():
                d = {k: v for k, v in detail.items() if k != "mismatches"}
                out.append(f"{pad}{arm}: {short_json(d)}")
                for m in detail.get("mismatches", [])[:5]:
                    out += f"{pad}  mismatch {m['item_id']}: {mismatch_where(m)}".split("\n")
        else:
            out.append(f"{pad}{key}: {short_json(value)}")
    return out


def short_json(value, limit: int = 400) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + " ..."
