"""Two runs side by side (`specbench compare RUN_A RUN_B`): per arm x task x level, each
run's speedup with its interval, and B's over A's with an interval of its own.

The ratio's interval combines the two runs' intervals on the log scale, each read as a
normal one at the study's level: se = (log upper - log lower) / (2 z), and the ratio's is
exp(log(B/A) +- z sqrt(se_A^2 + se_B^2)). A run folder keeps its intervals, not its
resamples, so this is the combination the folders allow; two independent runs make the
variances add. Beside it, each arm's own per-user speed B over A (the drafter's and the
baseline's), which says which arm moved: a speedup that fell because the drafter slowed
reads "drafter x0.90, baseline x1.00".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pandas as pd

from harness.errors import InputError
from harness.rundir.manifest import Manifest, read_manifest

KEY = ["arm", "task", "concurrency"]
# A speed moved when B's is this far from A's (a point figure: the arms' own speeds
# carry no interval in speedups.csv).
MOVED_SHARE = 0.03


@dataclass(frozen=True)
class RunTables:
    root: Path
    run_id: str
    manifest: Manifest
    study: dict[str, Any]
    speedups: pd.DataFrame

    @property
    def level(self) -> float:
        # study.json holds the resolved study under "study" (beside its data digests).
        study = self.study.get("study", self.study)
        return float(((study.get("bars") or {}).get("intervals") or {}).get("level", 0.95))


def read_run(root: Path) -> RunTables:
    """A finished run folder's speedups, manifest and study, or a one-line refusal."""
    files = {name: root / name for name in ("manifest.json", "study.json", "speedups.csv")}
    for name, path in files.items():
        if not path.exists():
            hint = " (run `specbench analyse` on it first)" if name == "speedups.csv" else ""
            raise InputError(f"{root}: no {name}{hint}")
    manifest = read_manifest(files["manifest.json"])
    try:
        study = json.loads(files["study.json"].read_text())
        speedups = pd.read_csv(files["speedups.csv"])
    except (OSError, ValueError) as err:
        raise InputError(f"{root}: unreadable run folder: {err}") from err
    missing = [c for c in (*KEY, "status", "speedup", "ci_lower", "ci_upper") if c not in speedups]
    if missing:
        raise InputError(f"{files['speedups.csv']}: no column {', '.join(missing)}")
    return RunTables(root, manifest.run_id or root.name, manifest, study, speedups)


def _log_se(lower: float, upper: float, z: float) -> float | None:
    if not (lower > 0 and upper > 0) or math.isnan(lower) or math.isnan(upper):
        return None
    return (math.log(upper) - math.log(lower)) / (2 * z)


def _ratio(b: Any, a: Any) -> float | None:
    try:
        x, y = float(b), float(a)
    except (TypeError, ValueError):
        return None
    return x / y if y > 0 and not (math.isnan(x) or math.isnan(y)) else None


def moved_text(drafter: float | None, baseline: float | None) -> str:
    parts = [f"drafter x{drafter:.2f}" if drafter is not None else "drafter -",
             f"baseline x{baseline:.2f}" if baseline is not None else "baseline -"]
    moved = [name for name, r in (("drafter", drafter), ("baseline", baseline))
             if r is not None and abs(r - 1) > MOVED_SHARE]
    verdict = {0: "neither arm moved", 2: "both arms moved"}.get(
        len(moved), f"the {moved[0]} moved" if moved else "")
    return f"{', '.join(parts)}: {verdict}"


def compare_speedups(a: RunTables, b: RunTables) -> pd.DataFrame:
    """One row per arm x task x level the two runs share."""
    level = a.level
    z = NormalDist().inv_cdf(0.5 + level / 2)
    merged = a.speedups.merge(b.speedups, on=KEY, suffixes=("_a", "_b"))
    rows = []
    for r in merged.to_dict(orient="records"):
        row: dict[str, Any] = {k: r[k] for k in KEY}
        for side in ("a", "b"):
            for col in ("status", "speedup", "ci_lower", "ci_upper", "tokens_per_round",
                         "round_cost_ratio", "engine_tokens_per_round"):
                row[f"{col}_{side}"] = r.get(f"{col}_{side}")
        ok = r["status_a"] == "ok" and r["status_b"] == "ok"
        ratio = _ratio(r["speedup_b"], r["speedup_a"]) if ok else None
        se_a = _log_se(r["ci_lower_a"], r["ci_upper_a"], z) if ok else None
        se_b = _log_se(r["ci_lower_b"], r["ci_upper_b"], z) if ok else None
        lo = hi = None
        if ratio is not None and se_a is not None and se_b is not None:
            half = z * math.hypot(se_a, se_b)
            lo, hi = ratio * math.exp(-half), ratio * math.exp(half)
        drafter = _ratio(r.get("speed_drafter_b"), r.get("speed_drafter_a"))
        baseline = _ratio(r.get("speed_baseline_b"), r.get("speed_baseline_a"))
        if lo is None:
            status = "not compared: " + (f"A {r['status_a']}, B {r['status_b']}" if not ok
                                         else "an interval is missing")
        elif hi < 1.0:
            status = "B slower"
        elif lo > 1.0:
            status = "B faster"
        else:
            status = "same within the interval"
        row.update(ratio=ratio, ratio_lower=lo, ratio_upper=hi, level=level,
                   drafter_speed_ratio=drafter, baseline_speed_ratio=baseline,
                   moved=moved_text(drafter, baseline), status=status)
        rows.append(row)
    return pd.DataFrame(rows)


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
    return [(k, fa.get(k, "(absent)"), fb.get(k, "(absent)"))
            for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
