"""The group-sequential design (harness.analysis.sequential): its boundaries spend the
registered error rate as the spending function says; each look's repeated interval; and
a look's decisions on hand-made run folders: a bar is decided where the bars read the
same at both ends of the intervals, and only the rows an undecided bar reads are kept."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.analysis import analyse
from harness.analysis.design import intervals_at, look_levels, spent, z_boundaries
from harness.analysis.intervals import t_interval
from harness.analysis.load import load_run
from harness.analysis.sequential import judge_look, needed_cells, run_at_look
from harness.errors import InputError
from harness.prereg import load_study_file, seal_of
from harness.prereg.schema import Study
from tests.run.conftest import ROOT, specbench

from .runfolder import BASE_SPEED, LEVELS, PASSING_SPEEDUPS, RunBuilder, study_dict


@pytest.mark.parametrize(
    "spending, fractions",
    [
        ("obrien_fleming", (2 / 3, 1.0)),
        ("obrien_fleming", (1 / 3, 2 / 3, 1.0)),
        ("pocock", (1 / 3, 2 / 3, 1.0)),
    ],
)
def test_the_boundaries_spend_the_error_rate_as_the_spending_function_says(spending, fractions):
    """Brownian paths under no effect: the share first crossing at each look is what the
    spending function adds there (Monte Carlo, 400,000 paths: +-0.0015)."""
    c = z_boundaries(spending, 0.05, fractions)
    rng = np.random.default_rng(51)
    steps = np.diff(np.concatenate([[0.0], fractions]))
    z = np.cumsum(rng.normal(size=(400_000, len(fractions))) * np.sqrt(steps), axis=1)
    z /= np.sqrt(fractions)
    crossed = np.zeros(len(z), bool)
    before = 0.0
    for k, t in enumerate(fractions):
        first = ~crossed & (np.abs(z[:, k]) >= c[k])
        crossed |= first
        assert first.mean() == pytest.approx(spent(spending, 0.05, t) - before, abs=0.0015)
        before = spent(spending, 0.05, t)
    assert crossed.mean() == pytest.approx(0.05, abs=0.002)


def sequential(sessions: int = 3, **design) -> Study:
    data = study_dict(sessions=sessions, sessions_for="speed_cells")
    return Study.model_validate(data | {"design": {"kind": "group_sequential", **design}})


def test_each_look_has_its_repeated_interval_and_a_fixed_design_none():
    study = sequential()
    # O'Brien-Fleming over looks after 2 and 3 of 3 sessions: 2.400 and 2.016 (z).
    assert look_levels(study) == pytest.approx({2: 0.98363, 3: 0.95617}, abs=2e-4)
    assert intervals_at(study, 2).level == pytest.approx(0.98363, abs=2e-4)
    assert intervals_at(study, 3).level == pytest.approx(0.95617, abs=2e-4)
    fixed = Study.model_validate(study_dict(sessions=3, sessions_for="speed_cells"))
    assert look_levels(fixed) == {} and intervals_at(fixed, 2) is fixed.bars.intervals
    pocock = sequential(sessions=4, looks=(3, 4), spending="pocock")
    assert list(look_levels(pocock)) == [3, 4]


def two_sessions(tmp_path: Path, speedups: dict[str, dict[int, float]]) -> RunBuilder:
    """Every speed cell in sessions 1 and 2 of 3, the drafters' two sessions 0.1 % apart
    (so every repeated interval is about +-2 % at 98.4 %), on chat and gsm8k."""
    run = RunBuilder(
        tmp_path,
        study_dict(sessions=3, sessions_for="speed_cells")
        | {"design": {"kind": "group_sequential"}},
    )
    for task in ("chat", "gsm8k"):
        for c in LEVELS:
            for s in (1, 2):
                suffix = "" if s == 1 else "/s2"
                for base in ("vllm-base", "sglang-base"):
                    run.speed(
                        base, task, c, BASE_SPEED, cell_id=f"{base}/{task}/speed/c{c:03d}{suffix}"
                    )
                for arm, by_c in speedups.items():
                    run.speed(
                        arm,
                        task,
                        c,
                        BASE_SPEED * by_c[c] * (1.0005 if s == 1 else 0.9995),
                        cell_id=f"{arm}/{task}/speed/c{c:03d}{suffix}",
                    )
    return run


def look(run: RunBuilder, stage: int = 2):
    data = (
        run_at_look(run_at_look(load_run(run.root), 1, 2), 2, 2)
        if stage == 2
        else run_at_look(load_run(run.root), 1, 2)
    )
    return analyse(data)


def test_a_look_decides_every_bar_both_ends_of_the_intervals_agree_on(tmp_path):
    run = two_sessions(tmp_path, PASSING_SPEEDUPS)
    a = look(run)
    row = a.speedups.set_index(["arm", "task", "concurrency"]).loc[("vllm-ngram", "chat", 1)]
    logs = np.log([2.5 * 1.0005, 2.5 * 0.9995])
    assert row["sessions"] == 2 and (row["ci_lower"], row["ci_upper"]) == pytest.approx(
        t_interval(logs, look_levels(run.study)[2]), rel=1e-6
    )
    out = judge_look(a)
    decided = {(d.bar, d.part): d.outcome for d in out.decided}
    assert decided == {
        ("pass.speed", ""): "pass",
        ("stop", ""): "not_fired",
        ("check", ""): "not_fired",
        **{
            ("pass.knee", f"{arm}/{task}"): "located"
            for arm in PASSING_SPEEDUPS
            for task in ("chat", "gsm8k")
        },
    }
    assert out.needed == set() and needed_cells(run.study, out) == set()


def test_an_open_bar_keeps_the_rows_it_reads_and_nothing_else(tmp_path):
    speedups = {arm: dict(by_c) for arm, by_c in PASSING_SPEEDUPS.items()}
    # No drafter clear of 2.0 at every pass level: n-gram sits on it at c=4. EAGLE-3 sits
    # on 1.0 at 16 users (its knee's bracket is open), and is far below it at 8 users.
    speedups["vllm-ngram"][4] = 2.0
    speedups["sglang-dflash"][4] = 1.95
    speedups["vllm-eagle3"][8], speedups["vllm-eagle3"][16] = 0.8, 1.0
    run = two_sessions(tmp_path, speedups)
    out = judge_look(look(run))
    decided = {(d.bar, d.part): d.outcome for d in out.decided}
    assert ("pass.speed", "") not in decided and ("stop", "") in decided
    # eagle3 falls below 1.0 at 8 users on every reading: its knee is decided there, and
    # its row at 16 (past the crossing) is read by no bar.
    assert decided[("pass.knee", "vllm-eagle3/chat")] == "located"
    pass_rows = {
        (arm, task, c) for arm in speedups for task in ("chat", "gsm8k") for c in (1, 2, 4)
    }
    assert out.needed == pass_rows
    cells = needed_cells(run.study, out)
    assert "vllm-base/chat/speed/c001" in cells and "vllm-eagle3/chat/speed/c016" not in cells


def test_a_stage_one_look_leaves_stage_two_to_its_own_looks(tmp_path):
    speedups = {arm: dict(by_c) | {4: 1.0} for arm, by_c in PASSING_SPEEDUPS.items()}
    run = two_sessions(tmp_path / "all", speedups)  # every knee may be at 4 users
    a = look(run, stage=1)
    assert set(a.speedups[a.speedups["concurrency"] > 4]["status"]) == {"missing"}
    out = judge_look(a)
    decided = {(d.bar, d.part): d.outcome for d in out.decided}
    assert decided == {("pass.speed", ""): "fail", ("stop", ""): "not_fired"}
    assert out.needed == {(arm, task, 4) for arm in speedups for task in ("chat", "gsm8k")}
    # Only a drafter that may still be the best is kept for the knee: one at 1.0 at four
    # users beside n-gram's 2.2 cannot be.
    speedups = {arm: dict(by_c) for arm, by_c in PASSING_SPEEDUPS.items()}
    speedups["vllm-eagle3"][4] = 1.0
    out = judge_look(look(two_sessions(tmp_path / "one", speedups), stage=1))
    assert out.needed == set()


def test_the_design_is_checked_and_a_fixed_one_keeps_its_seal(tmp_path):
    base = yaml.safe_load((ROOT / "examples" / "scripted-sequential.yaml").read_text())
    for change, said in [
        (
            {"recording": base["recording"] | {"sessions": 2}},
            "design.kind: a group-sequential design needs at least two looks",
        ),
        (
            {"design": {"kind": "group_sequential", "looks": [1, 4]}},
            "design.looks: expected ascending session counts from 2 on",
        ),
        (
            {"bars": base["bars"] | {"intervals": {"method": "bootstrap"}}},
            "bars.intervals.method: a group-sequential design reads t intervals",
        ),
    ]:
        path = tmp_path / "study.yaml"
        path.write_text(yaml.safe_dump(base | change, sort_keys=False))
        with pytest.raises(InputError, match=said):
            load_study_file(path)
        proc = specbench("validate", str(path), check=False)
        assert proc.returncode == 2 and said in proc.stderr and "study.yaml:" in proc.stderr
    # A study that registers no design reads as fixed and keeps the seal it had before.
    study = load_study_file(ROOT / "prereg.yaml").study
    assert study.design.kind == "fixed"
    from harness.prereg.seal import canonical_json, resolved_study

    resolved = resolved_study(study)
    assert "design" not in resolved["study"]
    assert seal_of(study) == hashlib.sha256(canonical_json(resolved).encode()).hexdigest()
    explicit = study.model_copy(update={"design": sequential().design})
    assert seal_of(explicit) != seal_of(study)
