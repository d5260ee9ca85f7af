"""Two runs side by side (`specbench compare RUN_A RUN_B`): per arm x task x level, each
run's speedup with its interval, and B's over A's with an interval of its own taken from
the session-level data in both folders (harness/analysis/compare_sessions.py: a t
interval on the difference of the runs' session log ratios; one session in each run,
the within-session bootstrap, said with a warning). Beside it, which arm moved, by the
same test on each arm's own per-user speed.

Across rows: each row's status is at the study's level on its own, so when nothing
changed about 1 - level of the rows compared over sessions still read "slower" or
"faster". The family-wise reading is Holm's: a row holds family-wise when its adjusted
p-value is below 1 - level, and then the chance that any row so marked is a false
finding is at most 1 - level, whatever the rows' dependence (they share sessions).
Rows with no session variation measured are left out of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.compare_sessions import Side, compare_row
from harness.analysis.frame import framed, rows_of
from harness.analysis.intervals import Units, session_units
from harness.analysis.load import RunData, load_run
from harness.analysis.rows import CompareRow, SpeedupRow
from harness.analysis.two_sample import holm
from harness.errors import InputError
from harness.rundir import STUDY_FILE
from harness.rundir.manifest import MANIFEST, Manifest

# Each run's own figures beside the other's: CompareRow's <name>_a and <name>_b.
SIDE_FIGURES = (
    "status",
    "speedup",
    "ci_lower",
    "ci_upper",
    "tokens_per_round",
    "round_cost_ratio",
    "engine_tokens_per_round",
)


@dataclass(frozen=True)
class RunTables:
    root: Path
    run_id: str
    manifest: Manifest
    speedups: list[SpeedupRow]  # speedups.csv read as the analysis's rows
    data: RunData  # the folder's cells, read for their sessions

    @property
    def level(self) -> float:
        return self.data.study.bars.intervals.level


def read_run(root: Path) -> RunTables:
    """A finished run folder's speedups and cells, or a one-line refusal."""
    files = {name: root / name for name in (MANIFEST, STUDY_FILE, "speedups.csv")}
    for name, path in files.items():
        if not path.exists():
            hint = " (run `specbench analyse` on it first)" if name == "speedups.csv" else ""
            raise InputError(f"{root}: no {name}{hint}")
    data = load_run(root)
    try:
        speedups = pd.read_csv(files["speedups.csv"])
    except (OSError, ValueError) as err:
        raise InputError(f"{root}: unreadable run folder: {err}") from err
    needed = ("arm", "task", "concurrency", "status", "speedup", "ci_lower", "ci_upper")
    missing = [c for c in needed if c not in speedups]
    if missing:
        raise InputError(f"{files['speedups.csv']}: no column {', '.join(missing)}")
    return RunTables(root, data.run_id, data.manifest, rows_of(speedups, SpeedupRow), data)


def run_side(
    run: RunData, arm: str, task: str, concurrency: int, units: dict[str, Units] | None = None
) -> Side | None:
    """The row's sessions in one run (None: the arms' sessions do not pair up). `units`:
    each cell's session_units by cell id, kept across rows (drafters share a baseline)."""
    units = {} if units is None else units
    try:
        baseline = run.study.arm(arm).baseline
    except KeyError:
        return None
    if baseline is None:
        return None
    drafter = run.sessions_of(run.find(arm, task, "speed", concurrency))
    base = run.sessions_of(run.find(baseline, task, "speed", concurrency))
    if len(drafter) != len(base) or not all(c.usable for c in drafter + base):
        return None
    for c in drafter + base:
        if c.id not in units:
            units[c.id] = session_units(c)
    side = Side([units[c.id] for c in drafter], [units[c.id] for c in base])
    return side if all(u.n for u in side.drafter + side.baseline) else None


def compare_speedups(a: RunTables, b: RunTables) -> pd.DataFrame:
    """One row per arm x task x level the two runs share, in A's order."""
    level = a.level
    b_at = {(r.arm, r.task, r.concurrency): r for r in b.speedups}
    rows = []
    units_a: dict[str, Units] = {}
    units_b: dict[str, Units] = {}
    for ra in a.speedups:
        rb = b_at.get((ra.arm, ra.task, ra.concurrency))
        if rb is None:
            continue
        row: dict[str, Any] = {"arm": ra.arm, "task": ra.task, "concurrency": ra.concurrency}
        for side, r in (("a", ra), ("b", rb)):
            row |= {f"{name}_{side}": getattr(r, name) for name in SIDE_FIGURES}
        row["level"] = level
        ok = ra.status == "ok" and rb.status == "ok"
        side_a = side_b = None
        if ok:
            c = int(ra.concurrency)
            side_a = run_side(a.data, ra.arm, ra.task, c, units_a)
            side_b = run_side(b.data, ra.arm, ra.task, c, units_b)
        if side_a is None or side_b is None:
            why = (
                f"A {ra.status}, B {rb.status}"
                if not ok
                else "the sessions of a run do not pair up"
            )
            row.update(status=f"not compared: {why}", moved="")
        else:
            row.update(
                compare_row(
                    side_a,
                    side_b,
                    a.data.study.bars.intervals,
                    f"{ra.arm}|{ra.task}|{ra.concurrency}",
                )
            )
        rows.append(row)
    return family_wise(framed(rows, CompareRow), level)


def family_wise(rows: pd.DataFrame, level: float) -> pd.DataFrame:
    """Holm's adjusted p-value over the rows compared over sessions, and whether each
    row's difference holds family-wise at 1 - level."""
    rows = rows.astype({"family_p": object, "family_wise": object})
    tested = rows.index[pd.to_numeric(rows["p_value"], errors="coerce").notna()]
    adjusted = holm([float(rows.at[i, "p_value"]) for i in tested])
    for i, p in zip(tested, adjusted, strict=True):
        rows.at[i, "family_p"] = p
        rows.at[i, "family_wise"] = p < 1.0 - level
    return rows


def family_summary(table: pd.DataFrame, level: float) -> str:
    """What the table says across its rows (the module's family-wise reading)."""
    tested = [r for r in rows_of(table, CompareRow) if _present(r.family_p)]
    differ = [r for r in tested if r.status in ("B slower", "B faster")]
    hold = [r for r in tested if r.family_wise]
    alpha = 1.0 - level
    return (
        f"{len(differ)} of {len(tested)} rows compared over sessions differ at {level:.0%}"
        f" each (about {alpha * len(tested):.1f} would by chance if nothing changed);"
        f" {len(hold)} hold family-wise (Holm: the chance that any of those is false is at"
        f" most {alpha:.0%})"
    )


def row_warnings(table: pd.DataFrame) -> list[str]:
    """Each distinct warning with the rows it applies to."""
    out: dict[str, list[str]] = {}
    for r in rows_of(table, CompareRow):
        if isinstance(r.warning, str):
            out.setdefault(r.warning, []).append(f"{r.arm}/{r.task} c={r.concurrency}")
    return [
        f"WARNING: {len(where)} row{'s' if len(where) > 1 else ''}"
        f" ({', '.join(where[:4])}{', ...' if len(where) > 4 else ''}): {text}"
        for text, where in out.items()
    ]


def _present(v: float | None) -> bool:
    """A figure the table holds (not None, not NaN)."""
    return v is not None and v == v


def interval_label(row: Any) -> str:
    """How B/A's interval was taken: the t's kind and df, or within sessions."""
    method = getattr(row, "interval_method", None)
    if not isinstance(method, str):
        return "-"
    if method == "within":
        return "within sessions"
    name = {
        "student": "Student",
        "welch": "Welch",
        "a_spread": "t, A's spread",
        "b_spread": "t, B's spread",
    }[method]
    return f"{name} df={int(row.df)} p={row.p_value:.3g}"


def family_label(row: Any) -> str:
    p = getattr(row, "family_p", None)
    if p is None or p != p:
        return "-"
    return f"{'holds' if row.family_wise else 'no'} (Holm p={p:.3g})"


def _engine_facts(manifest: Manifest) -> dict[str, str]:
    out = {}
    for arm, starts in manifest.engines.items():
        if not starts:
            continue
        first = starts[0]
        out[f"engine {arm} version"] = str(first.version)
        for key, value in sorted(first.settings.items()):
            out[f"engine {arm} {key}"] = str(value)
    return out


def environment_differences(a: RunTables, b: RunTables) -> list[tuple[str, str, str]]:
    """What differs between the runs' records: the seal, specbench's commit, the host
    (CPU, GPU, driver), each arm's engine version and settings."""

    def facts(run: RunTables) -> dict[str, str]:
        m = run.manifest
        out = {"seal": str(m.seal), "specbench commit": str(m.specbench_commit)}
        host = m.host.model_dump() if m.host else {}
        out.update({f"host {k}": str(v) for k, v in host.items() if k != "hostname"})
        out.update(_engine_facts(m))
        return out

    fa, fb = facts(a), facts(b)
    return [
        (k, fa.get(k, "(absent)"), fb.get(k, "(absent)"))
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k)
    ]
