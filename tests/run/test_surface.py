"""The round-cost surface as a registered stage, end to end on the scripted engine, whose
round cost is declared (examples/scripted-surface.yaml): the surface's cost ratios and
break-even acceptance lengths match the declaration within 2 %, a drafter above and one
below break-even are labelled pays and does not pay, and the report has its page
(issue 32, parts 2, 3, 5 and 6). Then the k schedule it proposes (k = 3 up to 2 users, 2
above) is run at every registered level and measured as predicted (part 4). Run here with
the pass level (2 users) in 3 sessions: the surface's and the schedule's cells there are
measured in the baseline's sessions, so the schedule's interval there is over sessions and
at 10 users (measured once) says it is not (issue 46 part 4). And `specbench plan` on the
registered study with a surface says what that stage would cost on the H100."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
import yaml

from harness.analysis.load import load_study_json
from harness.rundir.manifest import read_manifest
from tests.run.conftest import ROOT, pdf_text, run_folder, specbench, verdict_of

EXAMPLE = ROOT / "examples" / "scripted-surface.yaml"
# The declaration (examples/scripted-surface.yaml): 10 ms a step up to 20 verified tokens,
# 0.5 ms a token above; a prompt costs nothing extra; 48 tokens a request.
MEMORY_S, TOKEN_S, MAX_TOKENS = 0.010, 0.0005, 48


def declared_cost(k: int, users: int, length: float) -> float:
    """A round's cost over a plain step at the decode batch the closed loop delivers:
    each request sits out two steps of its R rounds (the step its answer ends in, the one
    that admits the next), so R / (R + 2) of the users are verified in a round."""
    rounds = MAX_TOKENS / length
    decoding = users * rounds / (rounds + 2)
    return max(MEMORY_S, TOKEN_S * (k + 1) * decoding) / max(MEMORY_S, TOKEN_S * decoding)


def declared_break_even(k: int, users: int, lengths: list[float]) -> float:
    speedups = [length / declared_cost(k, users, length) for length in lengths]
    for i in range(1, len(lengths)):
        (l0, s0), (l1, s1) = (lengths[i - 1], speedups[i - 1]), (lengths[i], speedups[i])
        if s0 < 1.0 <= s1:
            return l0 + (1.0 - s0) / (s1 - s0) * (l1 - l0)
    raise AssertionError(f"the declaration has no break-even at k={k}, c={users}")


@pytest.fixture(scope="module")
def surface_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """examples/scripted-surface.yaml run once, the pass level (2 users) in 3 sessions:
    (the run folder, the reports folder)."""
    root = tmp_path_factory.mktemp("surface")
    results, reports = root / "results", root / "reports"
    data = yaml.safe_load(EXAMPLE.read_text())
    data["recording"] |= {"sessions": 3, "sessions_for": "pass_cells"}  # c=2 repeats
    study_file = root / "scripted-surface.yaml"
    study_file.write_text(yaml.safe_dump(data, sort_keys=False))
    specbench("run", str(study_file), "--results", str(results), "--reports", str(reports))
    return run_folder(results), reports


@pytest.mark.timing
def test_the_surface_stage_measures_the_declared_round_cost_and_places_each_drafter(
    surface_run: tuple[Path, Path], tmp_path: Path
) -> None:
    run, reports = surface_run

    # Stage 4 ran after the registered stages, one engine start per control arm and session.
    manifest = read_manifest(run / "manifest.json")
    surface_arms = [a for a in manifest.engines if a.startswith("surface-k")]
    assert sorted(surface_arms) == [
        "surface-k2-L1.25",
        "surface-k2-L2.25",
        "surface-k3-L1.25",
        "surface-k3-L2.25",
        "surface-k3-L3.25",
    ]
    assert all(len(manifest.engines[a]) == 3 for a in surface_arms)
    assert len(manifest.engines["surface-schedule-chat"]) == 3
    study = load_study_json(run)  # read back: the registration's arms, no generated ones
    assert [a.name for a in study.arms] == ["base", "drafter", "weak"]

    cells = pd.read_csv(run / "surface_cells.csv")
    assert len(cells) == 10 and (cells["status"] == "ok").all(), cells
    by_level = cells.groupby("concurrency")
    assert set(by_level.get_group(2)["interval_method"]) == {"t_sessions"}
    assert (by_level.get_group(2)["sessions"] == 3).all()
    assert all(len(json.loads(v)) == 3 for v in by_level.get_group(2)["round_cost_ratio_sessions"])
    assert set(by_level.get_group(10)["interval_method"]) == {"within"}
    for r in cells.itertuples():
        want = declared_cost(r.k, r.concurrency, r.acceptance_length)
        assert r.round_cost_ratio == pytest.approx(want, rel=0.02), (r.arm, r.concurrency, want)

    surface = pd.read_csv(run / "surface.csv").set_index(["k", "concurrency"])
    assert list(surface.loc[(2, 2), ["status"]]) == ["below_measured"]  # one plain step
    assert list(surface.loc[(3, 2), ["status"]]) == ["below_measured"]
    for k, lengths in ((2, [1.25, 2.25]), (3, [1.25, 2.25, 3.25])):
        row = surface.loc[(k, 10)]
        assert row["status"] == "located", row
        assert row["break_even_length"] == pytest.approx(
            declared_break_even(k, 10, lengths), rel=0.02
        ), k

    verdict = verdict_of(run)
    placed = {(p["arm"], p["concurrency"]): p for p in verdict["surface"]["placements"]}
    assert placed[("drafter", 10)]["status"] == "pays"  # ~3 tokens a round, needs ~1.85
    assert placed[("weak", 10)]["status"] == "does_not_pay"  # 1.3 a round, needs ~1.4
    assert placed[("weak", 10)]["label"].startswith("does not pay: needs 1.4")
    assert placed[("weak", 2)]["status"] == "pays"  # every L measured pays at 2 users
    assert all(
        line.endswith("the gain falls with load for the round's cost")
        for line in verdict["surface"]["loss_of_gain"]
    ), verdict["surface"]
    # The k schedule: every round costs a plain step at 2 users, so the drafter's own k = 3;
    # at 10, k = 2 (2.6 tokens over x1.4) beats k = 3 (3.1 over x1.8).
    schedule = {r["concurrency"]: r for r in verdict["surface"]["schedule"]}
    assert (schedule[2]["k"], schedule[10]["k"]) == (3, 2), schedule
    # At 2 users the prediction's interval is over the 3 sessions; at 10, measured once.
    assert "one session" not in schedule[2]["label"]
    assert "(one session: session variation not in the interval)" in schedule[10]["label"]
    assert schedule[10]["candidates"]["2"] > 1.05 * schedule[10]["candidates"]["3"]
    assert verdict["surface"]["schedule_settings"] == {
        "chat": "scripted: drafter.k_schedule [[1, 2, 3], [3, null, 2]] (the spec's k_schedule)"
    }

    # Stage 5 ran that schedule: recorded once in the manifest, carried by the engine's
    # command, measured at both registered levels beside the prediction.
    record = manifest.k_schedules["surface-schedule-chat"]
    assert record.ranges == [(1, 2, 3), (3, None, 2)]
    for start in manifest.engines["surface-schedule-chat"]:
        assert '"k_schedule":[[1,2,3],[3,null,2]]' in " ".join(start.command)
    verified = pd.read_csv(run / "schedule.csv").set_index("concurrency")
    assert list(verified["k"]) == [3, 2] and list(verified["threshold"]) == [False, True]
    assert (verified["status"] == "ok").all() and not verified["collapse"].any(), verified
    for c in (2, 10):  # the declared model: measured within 4 % of the surface's prediction
        assert verified.loc[c, "speedup"] == pytest.approx(
            verified.loc[c, "predicted_speedup"], rel=0.04
        ), c
    # At 10 users the schedule's k = 2 beats the drafter's own k = 3 (its registered cell).
    own = pd.read_csv(run / "speedups.csv").set_index(["arm", "concurrency"])
    assert verified.loc[10, "ci_lower"] > own.loc[("drafter", 10), "ci_upper"]
    assert [r["label"] for r in verdict["surface"]["verification"]][1].startswith(
        "k=2 at 10 users (a threshold: k changes here): predicted x1."
    )
    assert verdict["surface"]["collapses"] == []
    assert {b["name"]: b["status"] for b in verdict["bars"]}["pass.speed"] == "pass"
    # No bar reads the surface: the best drafter is a registered one.
    speed = next(b for b in verdict["bars"] if b["name"] == "pass.speed")
    assert speed["evidence"]["tasks"]["chat"]["best_drafter"] == "drafter"

    pdf = reports / f"{run.name}.pdf"
    text = pdf_text(pdf)
    assert "The round-cost surface: task chat" in text
    assert "weak (k=2) c=10: does not pay: needs 1.4" in text
    assert "The k schedule verified: task chat" in text
    # Looked at as pages: the surface page and the verification page render, not blank.
    pages = text.split("\f")
    for title in ("The round-cost surface: task chat", "The k schedule verified: task chat"):
        number = next(i for i, page in enumerate(pages, 1) if title in page)
        png = tmp_path / f"page{number}"
        subprocess.run(
            [
                "pdftoppm",
                "-r",
                "40",
                "-png",
                "-singlefile",
                "-f",
                str(number),
                "-l",
                str(number),
                str(pdf),
                str(png),
            ],
            check=True,
            timeout=120,
        )
        pixels = np.asarray(matplotlib.image.imread(png.with_suffix(".png")))
        assert pixels.std() > 0.01, f"{title}: page {number} is blank"


@pytest.mark.timing
def test_the_surface_view_draws_the_declared_cost_and_break_even(
    surface_run: tuple[Path, Path],
) -> None:
    """The one view both reports draw (harness/report/views/surface.py), read from the
    run: each k's round cost and break-even length the declaration's, within 2 %; at 2
    users every L measured pays (a v under the lowest, 1.25); both drafters placed; the
    schedule verified at both levels beside the drafter at its own k."""
    from harness.analysis import analyse, evaluate
    from harness.report.views.surface import build_surface_view

    run, _ = surface_run
    a = analyse(run)
    view = build_surface_view(a, evaluate(a))
    assert view.registered and view.levels == [2, 10] and view.drafter == "drafter"
    (task,) = view.tasks
    assert task.title == "The round-cost surface: task chat" and not task.no_cell
    lengths = {2: [1.25, 2.25], 3: [1.25, 2.25, 3.25]}
    assert [line.k for line in task.ks] == [2, 3]
    for line in task.ks:
        assert line.cost.users.tolist() == [2, 10]
        for c, cost in zip(line.cost.users.tolist(), line.cost.ratio, strict=True):
            # The surface's cost at a level: its arms' (one per L) median, each declared.
            declared = np.median([declared_cost(line.k, c, length) for length in lengths[line.k]])
            assert cost == pytest.approx(declared, rel=0.02), (line.k, c)
        assert line.break_even.users.tolist() == [10]
        assert line.break_even.length[0] == pytest.approx(
            declared_break_even(line.k, 10, lengths[line.k]), rel=0.02
        )
        assert line.bounds == [(2, 1.25, True)]
    assert [d.label for d in task.drafters] == ["drafter (k=3) reaches", "weak (k=2) reaches"]
    assert all([p.concurrency for p in d.placements] == [2, 10] for d in task.drafters)
    assert task.lines[0] == "break-even (v: every L measured pays; ^: none does):"
    verified = task.verification
    assert verified is not None and verified.title == "The k schedule verified: task chat"
    assert [r.concurrency for r in verified.ok] == [r.concurrency for r in verified.predicted]
    assert [r.concurrency for r in verified.ok] == [2, 10]
    assert [r.concurrency for r in verified.own] == [2, 10]
    assert verified.lines[0] == "schedule (batch sizes: k): 1-2: k=3, 3-: k=2"


def section_traces(html: str, section: str) -> list[dict[str, dict]]:
    """Each plotly figure drawn in the HTML report's `section`: its traces by name, with x
    and y as lists (plotly writes a numpy column as a typed array in base64)."""
    start = html.index(f'<section class="report-section" id="{section}"')
    end = html.find('<section class="report-section"', start + 1)
    part = html[start : end if end > 0 else len(html)]

    def values(v: object) -> list:
        if isinstance(v, dict):  # {"dtype": "f8", "bdata": "..."}
            return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
        return list(v) if isinstance(v, list) else []

    figures = []
    for m in re.finditer(r'Plotly\.newPlot\(\s*"fig-\d+",\s*', part):
        traces, _ = json.JSONDecoder().raw_decode(part, m.end())
        named = [t for t in traces if t.get("name")]
        figures.append(
            {t["name"]: {"x": values(t.get("x")), "y": values(t.get("y"))} for t in named}
        )
    return figures


def assert_html_surface(html: str, run: Path) -> None:
    """The HTML report's surface section draws the surface (a round's cost and the
    break-even L per k, each drafter placed) and the k schedule verified (measured beside
    predicted), their points the run's surface.csv and schedule.csv."""
    figures = section_traces(html, "surface")
    assert len(figures) == 2, [list(f) for f in figures]
    drawn, verified = figures
    surface = pd.read_csv(run / "surface.csv")
    for k in (2, 3):
        rows = surface[(surface["task"] == "chat") & (surface["k"] == k)]
        rows = rows.sort_values("concurrency")
        assert drawn[f"k={k}"]["x"] == [2, 10]
        assert drawn[f"k={k}"]["y"] == pytest.approx(list(rows["round_cost_ratio"]))
        located = rows[rows["status"] == "located"]  # at 10 users; at 2, every L pays
        assert drawn[f"break-even, k={k}"]["x"] == [10]
        assert drawn[f"break-even, k={k}"]["y"] == pytest.approx(list(located["break_even_length"]))
    assert drawn["pays at every L measured"]["x"] == [2]  # the triangle where none is located
    assert drawn["drafter (k=3) reaches"]["x"] == drawn["weak (k=2) reaches"]["x"] == [2, 10]
    schedule = pd.read_csv(run / "schedule.csv").sort_values("concurrency")
    assert set(verified) >= {
        "measured (95 % interval)",
        "predicted from the surface",
        "drafter at its own k",
    }, list(verified)
    measured, predicted = (
        verified["measured (95 % interval)"],
        verified["predicted from the surface"],
    )
    assert measured["x"] == predicted["x"] == [2, 10]
    assert measured["y"] == pytest.approx(list(schedule["speedup"]))
    assert predicted["y"] == pytest.approx(list(schedule["predicted_speedup"]))
    assert verified["drafter at its own k"]["x"] == [2, 10]


@pytest.mark.timing
def test_the_html_report_draws_the_surface_and_the_schedule_it_verified(
    surface_run: tuple[Path, Path],
) -> None:
    run, reports = surface_run
    assert_html_surface((reports / f"{run.name}.html").read_text(encoding="utf-8"), run)


def test_plan_says_what_a_surface_would_cost_on_the_registered_h100(tmp_path):
    shutil.copytree(ROOT / "arms", tmp_path / "arms")
    data = yaml.safe_load((ROOT / "prereg.yaml").read_text())
    data["surface"] = {
        "drafter": "vllm-eagle3",
        "k": [1, 3, 5],
        "acceptance_length": [1.5, 2.5, 3.5],
        "concurrency": [1, 4, 16, 64],
        "tasks": ["chat"],
    }
    path = tmp_path / "prereg.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = specbench("plan", str(path)).stdout
    (line,) = [x for x in out.splitlines() if x.startswith("round-cost surface")]
    assert "7 control arms of vllm-eagle3" in line and "84 cells, estimated" in line, line
    assert "of the GPU time below" in line
    planned = json.loads(specbench("plan", str(path), "--format", "json").stdout)
    assert planned["surface"]["cells"] == 84 and planned["surface"]["estimated_gpu_seconds"] > 0
    assert sum(1 for c in planned["cells"] if c["stage"] == 4) == 84  # 3 sessions each
