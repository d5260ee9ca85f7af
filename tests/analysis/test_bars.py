"""Every bar outcome on hand-made run folders: PASS, FAIL (speed, identity, accuracy),
STOP and not-yet-judgeable, check fired with rerun agreeing / disagreeing / missing,
invalid cells excluded, INCOMPLETE on missing cells."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.analysis import analyse, check_bar_targets, judge_stop, write_verdict
from harness.analysis.stop_check import agreement
from harness.rundir.schedule import SkippedCell, StopDecisionRecord

from .runfolder import (
    ACCURACY_ITEMS,
    BASE_SPEED,
    IDENTITY_ITEMS,
    LEVELS,
    PASSING_SPEEDUPS,
    RunBuilder,
    session_factor,
    study_dict,
)


def bar(verdict: dict, name: str) -> dict:
    return next(b for b in verdict["bars"] if b["name"] == name)


@pytest.fixture
def passing(tmp_path) -> RunBuilder:
    return RunBuilder(tmp_path).full_passing_run()


def test_pass_writes_verdict_with_evidence(passing):
    v = write_verdict(passing.root).to_json()
    assert v["verdict"] == "PASS", v["reasons"]
    on_disk = json.loads((passing.root / "verdict.json").read_text())
    assert on_disk["verdict"] == "PASS" and on_disk["seal"] == "f" * 64
    assert {"seal", "verdict", "bars", "reruns"} <= set(on_disk)
    speed = bar(v, "pass.speed")
    assert speed["status"] == "pass"
    chat = speed["evidence"]["tasks"]["chat"]
    # DFlash has the highest minimum speedup over c=1,2,4 (2.5 vs 2.2 vs 1.6).
    assert chat["best_drafter"] == "sglang-dflash"
    assert chat["minima"] == pytest.approx(
        {"vllm-ngram": 2.2, "vllm-eagle3": 1.6, "sglang-dflash": 2.5}
    )
    assert [f["concurrency"] for f in chat["figures"]] == [1, 2, 4]
    assert chat["figures"][0]["speedup"] == pytest.approx(3.0)
    assert chat["figures"][0]["baseline_cell"] == "sglang-base/chat/speed/c001"
    assert "highest minimum" in chat["rule"]
    for name in ("pass.identity", "pass.accuracy", "pass.knee"):
        assert bar(v, name)["status"] == "pass"
    assert bar(v, "stop")["status"] == "not_fired"
    assert bar(v, "check")["status"] == "not_fired"
    assert v["excluded_cells"] == []


def test_fail_speed_when_best_drafter_is_below_threshold(tmp_path):
    slow = {arm: {c: s * 0.75 for c, s in by_c.items()} for arm, by_c in PASSING_SPEEDUPS.items()}
    b = RunBuilder(tmp_path)
    b.speed_cells(slow)
    b.identity_cells()
    b.accuracy_cells()
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "FAIL"
    speed = bar(v, "pass.speed")
    assert speed["status"] == "fail"
    figures = speed["evidence"]["tasks"]["gsm8k"]["figures"]
    # dflash at 2.25, 2.1, 1.875: only c=4 misses the bar
    assert [f["passes"] for f in figures] == [True, True, False]
    assert bar(v, "stop")["status"] == "not_fired"
    assert "pass.speed" in v["reasons"][0]


def test_fail_identity_names_the_first_divergence(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    base = {item: f"The answer to {item} is 42 and that is all." for item in IDENTITY_ITEMS}
    changed = dict(base)
    changed["item3"] = "The answer to item3 is 43 and that is all."
    b.identity_cells({"sglang-dflash": changed})
    b.accuracy_cells()
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "FAIL"
    ident = bar(v, "pass.identity")
    assert ident["status"] == "fail"
    arm = ident["evidence"]["tasks"]["chat"]["arms"]["sglang-dflash"]
    assert arm["n_identical"] == 7 and arm["n_compared"] == 8
    assert arm["share"] == pytest.approx(7 / 8)
    (m,) = arm["mismatches"]
    assert m["item_id"] == "item3"
    assert m["char_index"] == len("The answer to item3 is 4")
    assert m["word_index"] == 5  # "43" vs "42"
    assert "43" in m["drafter_text"] and "42" in m["baseline_text"]


def test_identity_of_a_non_best_drafter_is_not_judged(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    b.identity_cells({"vllm-eagle3": {i: "different" for i in IDENTITY_ITEMS}})
    b.accuracy_cells()
    assert write_verdict(b.root).to_json()["verdict"] == "PASS"


def test_fail_accuracy_outside_the_baseline_interval(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    b.identity_cells()
    b.accuracy_cells({"sglang-dflash": 50}, base_correct=70)
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "FAIL"
    acc = bar(v, "pass.accuracy")
    assert acc["status"] == "fail"
    # MMLU has no speed use: the pooled best drafter over the speed tasks is judged.
    mmlu = acc["evidence"]["tasks"]["mmlu"]
    assert list(mmlu["arms"]) == ["sglang-dflash"]
    e = mmlu["arms"]["sglang-dflash"]
    assert e["accuracy"] == pytest.approx(0.5) and e["baseline_accuracy"] == pytest.approx(0.7)
    lo, hi = e["baseline_interval"]
    assert lo == pytest.approx(0.6041, abs=1e-3) and hi == pytest.approx(0.7814, abs=1e-3)
    p = e["paired"]
    assert (p["both_right"], p["only_a"], p["only_b"], p["both_wrong"]) == (50, 0, 20, 30)
    assert p["mcnemar_p"] == pytest.approx(2 * 0.5**20)


def stop_speedups() -> dict:
    """Every drafter below 1.3 at c=1, 2, 4, each with its own profile."""
    return {
        "vllm-ngram": {1: 1.25, 2: 1.1, 4: 0.8, 8: 0.7, 16: 0.6},
        "vllm-eagle3": {1: 1.1, 2: 1.2, 4: 1.29, 8: 1.0, 16: 0.9},
        "sglang-dflash": {1: 0.9, 2: 0.85, 4: 0.8, 8: 0.7, 16: 0.6},
    }


def test_stop_fires_and_skipped_cells_are_reported(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells(stop_speedups(), levels=[1, 2, 4])
    decision = judge_stop(b.root, b.study)
    assert decision.fired is True
    chat = decision.evidence["tasks"]["chat"]
    assert chat["below_threshold_everywhere"] is True
    # the fastest figure anywhere at c <= 4 is eagle3's 1.29 at c=4
    assert (chat["maximum"]["arm"], chat["maximum"]["concurrency"]) == ("vllm-eagle3", 4)
    assert chat["maximum"]["value"] == pytest.approx(1.29)
    assert chat["maximum"]["figure"]["drafter_cell"] == "vllm-eagle3/chat/speed/c004"
    assert len(chat["figures"]) == 9  # every drafter at every stop level, with its cells
    b.manifest.stop = StopDecisionRecord(fired=True, judged_wall=1.0, evidence={})
    b.manifest.skipped = [
        SkippedCell(cell=f"{a['name']}/{t}/speed/c{c:03d}", reason="stop bar fired")
        for a in b.study_data["arms"]
        for t in ("chat", "gsm8k")
        for c in (8, 16)
    ]
    b.write_manifest()
    b.identity_cells()
    b.accuracy_cells()
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "STOP"
    stop = bar(v, "stop")
    assert stop["status"] == "fired"
    assert len(stop["evidence"]["skipped_cells"]) == 20
    assert any("fastest vllm-eagle3 1.29 at c=4" in line for line in stop["summary"])
    knees = {(k["arm"], k["task"]): k for k in bar(v, "pass.knee")["evidence"]["knees"]}
    # ngram's points 1.25, 1.1, 0.8: the knee lies between c=2 and c=4, at 2^(1 + 1/3)
    ngram = knees[("vllm-ngram", "chat")]
    assert (ngram["status"], ngram["bracket_low"], ngram["bracket_high"]) == ("located", 2, 4)
    assert ngram["knee_concurrency"] == pytest.approx(2.519842, rel=1e-6)
    # eagle3's gain is left at c=4, the highest level measured: a bound, the rest skipped
    assert knees[("vllm-eagle3", "chat")]["status"] == "beyond_skipped"
    assert knees[("vllm-eagle3", "chat")]["label"] == "> 4"


def test_stop_does_not_fire_when_one_drafter_is_fast_at_one_user(tmp_path):
    """The must-show: eagle3 near 3x at one user falling below 1x at four users, n-gram
    and DFlash flat near 1.2x. The drafter with the highest minimum (n-gram) is below
    1.3 everywhere, but eagle3 triples one user's speed: the study goes on."""
    profiles = {
        "vllm-eagle3": {1: 3.0, 2: 1.8, 4: 0.9, 8: 0.7, 16: 0.5},
        "vllm-ngram": {1: 1.2, 2: 1.2, 4: 1.2, 8: 1.1, 16: 1.0},
        "sglang-dflash": {1: 1.15, 2: 1.15, 4: 1.15, 8: 1.1, 16: 1.0},
    }
    b = RunBuilder(tmp_path)
    b.speed_cells(profiles, levels=[1, 2, 4])
    d = judge_stop(b.root, b.study)
    assert d.fired is False
    for task in ("chat", "gsm8k"):
        t = d.evidence["tasks"][task]
        assert t["below_threshold_everywhere"] is False
        assert (t["maximum"]["arm"], t["maximum"]["concurrency"]) == ("vllm-eagle3", 1)
        assert t["maximum"]["value"] == pytest.approx(3.0)
        assert t["by_arm"]["vllm-ngram"] == pytest.approx({"1": 1.2, "2": 1.2, "4": 1.2})


def test_stop_is_decided_by_a_fast_drafter_even_with_an_unusable_cell(tmp_path):
    """A usable figure at or above the threshold cannot be undone by a missing one; all
    figures below with one missing leaves the stop undetermined."""
    fast = {arm: {c: 1.2 for c in (1, 2, 4)} for arm in PASSING_SPEEDUPS}
    fast["vllm-eagle3"][1] = 2.0
    b = RunBuilder(tmp_path)
    b.speed_cells(fast, levels=[1, 2, 4])
    b.speed("sglang-dflash", "chat", 2, BASE_SPEED * 1.2, valid=False)
    d = judge_stop(b.root, b.study)
    assert d.fired is False
    assert [c["cell"] for c in d.evidence["unusable_cells"]] == ["sglang-dflash/chat/speed/c002"]
    slow = RunBuilder(tmp_path / "slow")
    slow.speed_cells(
        {arm: {c: 1.2 for c in (1, 2, 4)} for arm in PASSING_SPEEDUPS}, levels=[1, 2, 4]
    )
    slow.speed("sglang-dflash", "chat", 2, BASE_SPEED * 1.2, valid=False)
    undecided = judge_stop(slow.root, slow.study)
    assert undecided.fired is None
    assert undecided.evidence["tasks"]["chat"]["below_threshold_everywhere"] is None
    assert undecided.evidence["tasks"]["gsm8k"]["below_threshold_everywhere"] is True


def test_stop_does_not_fire_when_one_task_is_fast(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells(stop_speedups(), levels=[1, 2, 4], tasks=("chat",))
    b.speed_cells(PASSING_SPEEDUPS, levels=[1, 2, 4], tasks=("gsm8k",))
    d = judge_stop(b.root, b.study)
    assert d.fired is False  # fires_when: all_tasks
    any_task = RunBuilder(tmp_path / "any", _stop_any())
    any_task.speed_cells(stop_speedups(), levels=[1, 2, 4], tasks=("chat",))
    any_task.speed_cells(PASSING_SPEEDUPS, levels=[1, 2, 4], tasks=("gsm8k",))
    assert judge_stop(any_task.root, any_task.study).fired is True


def _stop_any() -> dict:
    return study_dict(stop={"threshold": 1.3, "concurrencies": [1, 2, 4], "fires_when": "any_task"})


def test_stop_not_judgeable_until_every_arms_early_cells_exist(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells(stop_speedups(), levels=[1, 2])
    d = judge_stop(b.root, b.study)
    assert d.fired is None
    missing = {x["cell"] for x in d.evidence["not_judgeable"]}
    assert "vllm-base/chat/speed/c004" in missing and "sglang-dflash/gsm8k/speed/c004" in missing
    json.dumps(d.evidence)  # the runner stores it in the manifest
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "INCOMPLETE"
    assert bar(v, "stop")["status"] == "not_judged"


def check_run(tmp_path) -> RunBuilder:
    """DFlash at 6x on c=1 over three paired sessions: the check bar fires on both tasks."""
    fast = {arm: dict(by_c) for arm, by_c in PASSING_SPEEDUPS.items()}
    fast["sglang-dflash"][1] = 6.0
    b = RunBuilder(tmp_path, study_dict(sessions=3))
    b.speed_cells(fast)
    b.identity_cells()
    b.accuracy_cells()
    return b


SESSIONS_C1 = [
    "sglang-base/{task}/speed/c001",
    "sglang-base/{task}/speed/c001/s2",
    "sglang-base/{task}/speed/c001/s3",
]


def rerun_baseline(b: RunBuilder, task: str, shift: float, factors=(1.0, 1.0, 1.0)) -> None:
    """Every session of the c=1 baseline rerun: session s at its original speed x shift x
    factors[s] (factors other than 1: the reruns' own session-to-session swing)."""
    for s, (cell_id, f) in enumerate(zip(SESSIONS_C1, factors, strict=True), 1):
        original = BASE_SPEED * session_factor(True, s, 3)
        b.speed(
            "sglang-base",
            task,
            1,
            original * shift * f,
            cell_id=cell_id.format(task=task) + "/rerun1",
        )


def test_check_fired_reruns_every_session_and_missing_is_incomplete(tmp_path):
    b = check_run(tmp_path)
    targets = check_bar_targets(b.root, b.study)
    assert targets == [c.format(task=t) for t in ("chat", "gsm8k") for c in SESSIONS_C1]
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "INCOMPLETE"
    check = bar(v, "check")
    assert check["status"] == "unresolved"
    assert {r["state"] for r in v["reruns"]} == {"missing"}
    assert "sglang-dflash/chat/speed/c001: 6.00x" in v["reruns"][0]["behind"]
    # One session rerun of three is still incomplete, and names the two left.
    b.speed(
        "sglang-base", "chat", 1, BASE_SPEED, cell_id=SESSIONS_C1[0].format(task="chat") + "/rerun1"
    )
    r = next(
        r
        for r in bar(write_verdict(b.root).to_json(), "check")["evidence"]["reruns"]
        if r["of"] == "sglang-base/chat/speed/c001"
    )
    assert r["state"] == "missing" and r["missing"] == [
        c.format(task="chat") for c in SESSIONS_C1[1:]
    ]


def test_check_rerun_agreeing_accepts_the_verdict(tmp_path):
    b = check_run(tmp_path)
    for task in ("chat", "gsm8k"):
        rerun_baseline(b, task, 1.05)
    assert check_bar_targets(b.root, b.study) == []
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "PASS", v["reasons"]
    check = bar(v, "check")
    assert check["status"] == "agreed" and check["evidence"]["agreement"] == "session_spread"
    r = v["reruns"][0]
    assert r["state"] == "agrees" and r["relative_difference"] == pytest.approx(0.05)
    assert (r["cell"], r["of"]) == (
        "sglang-base/chat/speed/c001/rerun1",
        "sglang-base/chat/speed/c001",
    )
    assert r["cells"] == [c.format(task="chat") + "/rerun1" for c in SESSIONS_C1]
    assert r["original_speed"] == pytest.approx(BASE_SPEED)
    assert r["rerun_speed"] == pytest.approx(BASE_SPEED * 1.05)
    # The baseline's sessions swing +-2 %: their spread is below agree_within, which holds.
    assert r["tolerance"] == pytest.approx(0.10)
    assert "original" in check["evidence"]["baseline_used"]
    # the speed figure still uses the original baseline run
    chat = bar(v, "pass.speed")["evidence"]["tasks"]["chat"]
    assert chat["figures"][0]["speedup"] == pytest.approx(6.0)
    sp = analyse(b.root).speedups.set_index(["arm", "task", "concurrency"])
    row = sp.loc[("sglang-dflash", "chat", 1)]
    assert row["baseline_rerun_ratio"] == pytest.approx(1.05)
    assert row["baseline_rerun_cell"].count("/rerun1") == 3


def test_check_rerun_disagreeing_is_incomplete_and_says_which(tmp_path):
    b = check_run(tmp_path)
    rerun_baseline(b, "chat", 1.05)
    rerun_baseline(b, "gsm8k", 1.3)  # a baseline 30 % off: disagrees
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "INCOMPLETE"
    states = {r["of"]: r["state"] for r in v["reruns"]}
    assert states == {
        "sglang-base/chat/speed/c001": "agrees",
        "sglang-base/gsm8k/speed/c001": "disagrees",
    }
    assert any(
        "gsm8k" in line and "rerun of 3 sessions disagrees" in line
        for line in bar(v, "check")["summary"]
    )


def test_agreement_is_judged_against_the_sessions_own_spread():
    """The registered reading (bars.check.agreement): a difference within agree_within
    always agrees; beyond it, session_spread still agrees while the difference lies within
    the two-sample t tolerance of the sessions' spread; a 30 % shift disagrees either way."""
    lab = [3496.0, 3325.0, 2960.0]  # three of the lab's plain-reference sessions
    sound = [3442.0, 2907.0, 3380.0]  # the other two and one more: the same engine again
    shifted = [s * 1.3 for s in lab]
    rule = {"agree_within": 0.10, "level": 0.95}
    r = agreement(lab, sound, rule="session_spread", **rule)
    assert r["state"] == "agrees" and r["relative_difference"] == pytest.approx(-0.0057, abs=1e-4)
    # Sessions this far apart (log sd 0.089) allow t_4 * sd * sqrt(2/3): 22 %.
    assert r["session_log_sd"] == pytest.approx(0.0891, abs=1e-4)
    assert r["tolerance"] == pytest.approx(0.2239, abs=1e-4)
    # +11 %: outside agree_within, inside what the sessions' own spread allows.
    up = [s * 1.12 for s in sound]
    assert agreement(lab, up, rule="session_spread", **rule)["state"] == "agrees"
    assert agreement(lab, up, rule="fixed_share", **rule)["state"] == "disagrees"
    for how in ("session_spread", "fixed_share"):
        r = agreement(lab, shifted, rule=how, **rule)
        assert r["state"] == "disagrees" and r["relative_difference"] == pytest.approx(0.3)
    # One session a side: no spread is measured, agree_within alone judges.
    assert agreement([100.0], [109.0], rule="session_spread", **rule)["state"] == "agrees"
    assert agreement([100.0], [111.0], rule="session_spread", **rule)["state"] == "disagrees"


def test_the_fixed_share_reading_is_a_registration_away(tmp_path):
    study = study_dict(
        sessions=3, check={"threshold": 5.0, "agree_within": 0.10, "agreement": "fixed_share"}
    )
    fast = {arm: dict(by_c) for arm, by_c in PASSING_SPEEDUPS.items()}
    fast["sglang-dflash"][1] = 6.0
    b = RunBuilder(tmp_path, study)
    b.speed_cells(fast)
    for task in ("chat", "gsm8k"):
        rerun_baseline(b, task, 1.08)
    b.identity_cells()
    b.accuracy_cells()
    v = write_verdict(b.root).to_json()
    check = bar(v, "check")
    assert check["status"] == "agreed" and check["evidence"]["agreement"] == "fixed_share"
    assert v["verdict"] == "PASS", v["reasons"]
    assert [r["tolerance"] for r in check["evidence"]["reruns"]] == pytest.approx([0.10, 0.10])
    assert [r["state"] for r in check["evidence"]["reruns"]] == ["agrees", "agrees"]


@pytest.mark.parametrize("kind", ["unhealthy", "aborted"])
def test_invalid_cells_are_excluded_and_named(tmp_path, kind):
    b = RunBuilder(tmp_path).full_passing_run()
    flag: dict[str, Any] = {"valid": False} if kind == "unhealthy" else {"aborted": True}
    b.speed("sglang-dflash", "chat", 2, BASE_SPEED * 2.8, **flag)
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "INCOMPLETE"
    assert [e["cell"] for e in v["excluded_cells"]] == ["sglang-dflash/chat/speed/c002"]
    reason = v["excluded_cells"][0]["reason"]
    assert ("client unhealthy" if kind == "unhealthy" else "aborted") in reason
    speed = bar(v, "pass.speed")
    assert speed["status"] == "incomplete"
    assert any(
        "sglang-dflash/chat c=2: invalid" in m
        for m in speed["evidence"]["tasks"]["chat"]["missing"]
    )


def test_missing_cells_make_the_verdict_incomplete(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    b.accuracy_cells()  # no identity cells
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "INCOMPLETE"
    assert bar(v, "pass.identity")["status"] == "incomplete"
    assert bar(v, "pass.speed")["status"] == "pass"
    assert "pass.identity" in v["reasons"][0]


def test_missing_high_level_leaves_the_knee_incomplete(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells(levels=[1, 2, 4, 8])
    b.identity_cells()
    b.accuracy_cells()
    v = write_verdict(b.root).to_json()
    assert bar(v, "pass.knee")["status"] == "incomplete"
    assert v["verdict"] == "INCOMPLETE"


def test_identity_all_drafters_judges_every_drafter(tmp_path):
    study = study_dict()
    study["bars"]["pass"]["identity"]["arms"] = "all_drafters"
    b = RunBuilder(tmp_path, study)
    b.speed_cells()
    b.identity_cells({"vllm-eagle3": {i: "different" for i in IDENTITY_ITEMS}})
    b.accuracy_cells()
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "FAIL"
    arms = bar(v, "pass.identity")["evidence"]["tasks"]["chat"]["arms"]
    assert set(arms) == {"vllm-ngram", "vllm-eagle3", "sglang-dflash"}
    assert arms["vllm-eagle3"]["status"] == "fail" and arms["vllm-ngram"]["status"] == "pass"


def test_speed_statistic_ci_lower_is_stricter_than_point(tmp_path):
    """A point speedup just above 2.0 at c=4: the point passes, the interval's lower
    bound does not."""
    edge = {arm: dict(by_c) for arm, by_c in PASSING_SPEEDUPS.items()}
    edge["sglang-dflash"][4] = 2.002
    edge["vllm-ngram"] = {c: min(s, 1.9) for c, s in edge["vllm-ngram"].items()}
    results = {}
    for statistic in ("point", "ci_lower"):
        study = study_dict()
        study["bars"]["pass"]["speed"]["statistic"] = statistic
        b = RunBuilder(tmp_path / statistic, study)
        b.speed_cells(edge)
        b.identity_cells()
        b.accuracy_cells()
        results[statistic] = write_verdict(b.root).to_json()
    assert bar(results["point"], "pass.speed")["status"] == "pass"
    assert results["point"]["verdict"] == "PASS", results["point"]["reasons"]
    assert results["ci_lower"]["verdict"] == "FAIL"
    assert results["ci_lower"]["reasons"] == ["failed: pass.speed"]
    strict = bar(results["ci_lower"], "pass.speed")
    assert strict["status"] == "fail"
    fig = strict["evidence"]["tasks"]["chat"]["figures"][2]
    assert fig["speedup"] == pytest.approx(2.002) and fig["ci_lower"] < 2.0
    assert not fig["passes"]


def test_require_any_task_and_pooled_best_drafter(tmp_path):
    mixed = {arm: dict(by_c) for arm, by_c in PASSING_SPEEDUPS.items()}
    study = study_dict()
    study["bars"]["pass"]["speed"].update(require="any_task", best_drafter="pooled")
    b = RunBuilder(tmp_path, study)
    b.speed_cells(mixed, tasks=("chat",))
    slow = {arm: {c: s * 0.7 for c, s in by_c.items()} for arm, by_c in mixed.items()}
    b.speed_cells(slow, tasks=("gsm8k",))
    b.identity_cells()
    b.accuracy_cells()
    v = write_verdict(b.root).to_json()
    speed = bar(v, "pass.speed")
    tasks = speed["evidence"]["tasks"]
    assert tasks["chat"]["status"] == "pass" and tasks["gsm8k"]["status"] == "fail"
    assert tasks["chat"]["best_drafter"] == tasks["gsm8k"]["best_drafter"] == "sglang-dflash"
    assert speed["status"] == "pass" and v["verdict"] == "PASS"


# --- accuracy on a task without speed cells ------------------------------------------


def test_mmlu_judges_every_per_task_best_drafter_not_the_pooled_one(tmp_path):
    """DFlash is best on chat, n-gram on GSM8K, eagle3 best pooled (highest minimum over
    both tasks). MMLU has no speed cells: DFlash and n-gram are judged there, and
    n-gram's MMLU accuracy, outside the baseline's interval, fails the bar."""
    chat = {
        "vllm-ngram": {1: 2.1, 2: 2.1, 4: 2.1, 8: 1.5, 16: 0.8},
        "vllm-eagle3": {1: 2.3, 2: 2.3, 4: 2.3, 8: 1.5, 16: 0.8},
        "sglang-dflash": {1: 2.6, 2: 2.6, 4: 2.6, 8: 1.5, 16: 0.8},
    }
    gsm8k = {
        "vllm-ngram": chat["sglang-dflash"],
        "vllm-eagle3": chat["vllm-eagle3"],
        "sglang-dflash": chat["vllm-ngram"],
    }
    b = RunBuilder(tmp_path)
    b.speed_cells(chat, tasks=("chat",))
    b.speed_cells(gsm8k, tasks=("gsm8k",))
    b.identity_cells()
    b.accuracy_cells()
    b.accuracy("vllm-ngram", "mmlu", {q: i < 50 for i, q in enumerate(ACCURACY_ITEMS)})
    v = write_verdict(b.root).to_json()
    speed = bar(v, "pass.speed")["evidence"]["tasks"]
    assert (speed["chat"]["best_drafter"], speed["gsm8k"]["best_drafter"]) == (
        "sglang-dflash",
        "vllm-ngram",
    )
    acc = bar(v, "pass.accuracy")
    mmlu = acc["evidence"]["tasks"]["mmlu"]
    assert mmlu["judged"] == {"sglang-dflash": "best on chat", "vllm-ngram": "best on gsm8k"}
    assert "no speed cells" in mmlu["arms_rule"]
    assert mmlu["arms"]["sglang-dflash"]["status"] == "pass"
    assert mmlu["arms"]["vllm-ngram"]["status"] == "fail"
    assert list(acc["evidence"]["tasks"]["gsm8k"]["judged"]) == ["vllm-ngram"]
    assert acc["status"] == "fail" and v["verdict"] == "FAIL"
    assert v["reasons"] == ["failed: pass.accuracy"]


def test_mmlu_is_incomplete_while_a_speed_tasks_best_is_undetermined(tmp_path):
    b = RunBuilder(tmp_path).full_passing_run()
    b.speed("vllm-ngram", "gsm8k", 2, BASE_SPEED * 2.4, valid=False)
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "INCOMPLETE"
    mmlu = bar(v, "pass.accuracy")["evidence"]["tasks"]["mmlu"]
    assert mmlu["status"] == "incomplete" and mmlu["judged"] is None
    assert mmlu["missing"] == ["vllm-ngram/gsm8k c=2: invalid"]


# --- the knee ----------------------------------------------------------------------------


def test_knee_is_judged_on_the_best_drafter_and_others_invalid_cells_do_not_block(tmp_path):
    b = RunBuilder(tmp_path).full_passing_run()
    b.speed("vllm-eagle3", "chat", 16, BASE_SPEED * 0.9, valid=False)
    v = write_verdict(b.root).to_json()
    knee = bar(v, "pass.knee")
    assert knee["status"] == "pass" and v["verdict"] == "PASS", v["reasons"]
    chat = knee["evidence"]["tasks"]["chat"]
    assert chat["judged"] == {"sglang-dflash": "the best drafter on chat"}
    assert chat["arms"]["sglang-dflash"]["knee_status"] == "located"
    shown = {(k["arm"], k["task"]): k["status"] for k in knee["evidence"]["knees"]}
    assert shown[("vllm-eagle3", "chat")] == "incomplete"  # reported beside, not judged
    assert "beside (not judged): vllm-eagle3/chat: incomplete" in knee["summary"]


def _lasting_gain(tmp_path, **knee) -> dict:
    lasting = {arm: dict(by_c) for arm, by_c in PASSING_SPEEDUPS.items()}
    lasting["sglang-dflash"][16] = 1.2  # still a gain at the top level
    study = study_dict()
    study["bars"]["pass"]["knee"].update(knee)
    b = RunBuilder(tmp_path, study)
    b.speed_cells(lasting)
    b.identity_cells()
    b.accuracy_cells()
    return write_verdict(b.root).to_json()


def test_a_gain_left_at_the_top_level_is_not_a_located_knee(tmp_path):
    v = _lasting_gain(tmp_path)
    knee = bar(v, "pass.knee")
    assert knee["status"] == "not_located"
    arm = knee["evidence"]["tasks"]["chat"]["arms"]["sglang-dflash"]
    assert (arm["status"], arm["knee"]) == ("not_located", "> 16")
    assert v["verdict"] == "FAIL"
    assert len(v["reasons"]) == 1 and v["reasons"][0].startswith("not located: pass.knee")
    assert "beyond_top / below_first: pass" in v["reasons"][0]
    assert all(
        bar(v, n)["status"] == "pass" for n in ("pass.speed", "pass.identity", "pass.accuracy")
    )


def test_a_registered_beyond_top_pass_accepts_the_bound(tmp_path):
    v = _lasting_gain(tmp_path, beyond_top="pass")
    knee = bar(v, "pass.knee")
    assert knee["status"] == "pass" and v["verdict"] == "PASS"
    assert knee["evidence"]["beyond_top"] == "pass"
    assert any("> 16: a bound, accepted as registered" in line for line in knee["summary"])


@pytest.mark.parametrize("below_first", ["not_located", "pass"])
def test_a_point_at_or_below_one_at_the_first_level_is_a_bound(tmp_path, below_first):
    """No drafter gains at one user: the best one's knee is "<= 1", a bound held to the
    registered reading (bars.pass.knee.below_first)."""
    losing = {arm: {c: 0.95 - 0.05 * i for i, c in enumerate(LEVELS)} for arm in PASSING_SPEEDUPS}
    study = study_dict()
    study["bars"]["pass"]["knee"]["below_first"] = below_first
    b = RunBuilder(tmp_path, study)
    b.speed_cells(losing)
    v = write_verdict(b.root).to_json()
    knee = bar(v, "pass.knee")
    arm = knee["evidence"]["tasks"]["chat"]["arms"]["vllm-ngram"]
    assert (arm["knee_status"], arm["knee"]) == ("below_first", "<= 1")
    assert knee["status"] == below_first and arm["status"] == below_first
    assert knee["evidence"]["below_first"] == below_first
    assert knee["summary"][-1].startswith(
        "reading: the knee is where the best drafter's"
        " speedup crosses 1.0, read on the point estimates"
    )


# --- identity: what a mismatch says, and a failed request --------------------------------


def test_identity_cell_with_one_errored_request_is_judged_on_the_rest(tmp_path):
    b = RunBuilder(tmp_path).full_passing_run()
    folder = b.root / "cells" / "sglang-dflash__chat__identity"
    lines = [json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines()]
    lines[3].update(error="HTTP 503", error_kind="http", output_text="", first_token_t=None)
    (folder / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    v = write_verdict(b.root).to_json()
    arm = bar(v, "pass.identity")["evidence"]["tasks"]["chat"]["arms"]["sglang-dflash"]
    assert (arm["status"], arm["n_compared"], arm["n_identical"]) == ("pass", 7, 7)
    assert arm["not_compared"] == [{"item_id": "item3", "why": "drafter: HTTP 503"}]
    assert arm["mismatches"] == []
    assert v["verdict"] == "PASS", v["reasons"]


def test_identity_mismatch_names_a_one_sided_max_tokens_cut(tmp_path):
    b = RunBuilder(tmp_path).full_passing_run()
    folder = b.root / "cells" / "sglang-dflash__gsm8k__identity"
    lines = [json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines()]
    lines[0].update(
        output_text="The answer to item0 is", finish_reason="length", completion_tokens=5
    )
    (folder / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    base = b.root / "cells" / "sglang-base__gsm8k__identity"
    blines = [json.loads(x) for x in (base / "requests.jsonl").read_text().splitlines()]
    blines[0].update(finish_reason="stop")
    (base / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in blines))
    v = write_verdict(b.root).to_json()
    (m,) = bar(v, "pass.identity")["evidence"]["tasks"]["gsm8k"]["arms"]["sglang-dflash"][
        "mismatches"
    ]
    assert (m["char_index"], m["word_index"]) == (len("The answer to item0 is"), 5)
    assert (m["drafter_finish"], m["baseline_finish"]) == ("length", "stop")
    assert (m["drafter_tokens"], m["baseline_tokens"]) == (5, 101)
    assert m["note"] == (
        "only the drafter hit max_tokens (finish_reason length); the other"
        " side finished with 'stop'"
    )
    assert v["verdict"] == "FAIL"


# --- degenerate bootstraps ---------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 21])
def test_degenerate_bootstrap_gives_the_point_as_its_interval(tmp_path, n):
    """One request per cell, or every request at the same speed: nothing to resample, so
    the interval is the point itself (finite, never NaN), and the bars still judge it."""
    b = RunBuilder(tmp_path)
    for task in ("chat", "gsm8k"):
        for c in (1, 2, 4):
            for arm in ("vllm-base", "sglang-base"):
                b.speed(arm, task, c, BASE_SPEED, n=n, spread=0.0)
            for arm, by_c in PASSING_SPEEDUPS.items():
                b.speed(arm, task, c, BASE_SPEED * by_c[c], n=n, spread=0.0)
    from harness.analysis import analyse

    sp = analyse(b.root).speedups
    sp = sp[sp["concurrency"] <= 4].set_index(["arm", "task", "concurrency"])
    row = sp.loc[("sglang-dflash", "chat", 4)]
    assert row["status"] == "ok" and row["n_drafter"] == n
    assert row["speedup"] == row["ci_lower"] == row["ci_upper"] == pytest.approx(2.5)
    assert judge_stop(b.root, b.study).fired is False


# --- sessions along the knee's curve -------------------------------------------------


@pytest.mark.parametrize("sessions_for", ["pass_cells", "speed_cells"])
def test_the_knee_says_when_its_curve_mixes_two_kinds_of_interval(tmp_path, sessions_for):
    """Three sessions at the pass levels alone leave c = 8 and 16 with one session's
    interval: the knee is located where the two kinds meet, and its note says so. With
    every level in sessions the curve is one kind and the note is plain."""
    b = RunBuilder(tmp_path, study_dict(sessions=3, sessions_for=sessions_for))
    b.speed_cells()
    b.identity_cells()
    b.accuracy_cells()
    v = write_verdict(b.root).to_json()
    assert v["verdict"] == "PASS", v["reasons"]
    knee = next(
        k
        for k in bar(v, "pass.knee")["evidence"]["knees"]
        if (k["arm"], k["task"]) == ("sglang-dflash", "chat")
    )
    assert knee["status"] == "located" and (knee["bracket_low"], knee["bracket_high"]) == (8, 16)
    sp = analyse(b.root).speedups
    row = sp[(sp["arm"] == "sglang-dflash") & (sp["task"] == "chat")].set_index("concurrency")
    if sessions_for == "pass_cells":
        assert row["interval_method"].tolist() == ["t_sessions"] * 3 + ["within"] * 2
        assert knee["note"].endswith(
            "; intervals of two kinds along the curve (t_sessions at c=1/2/4, within at c=8/16)"
        )
    else:
        assert row["interval_method"].tolist() == ["t_sessions"] * 5
        assert "two kinds" not in knee["note"]
        # The t interval over the sessions' paired ratios (drafter +-3 %, baseline +-2 %).
        assert row.loc[8, "ci_lower"] < 1.6 * 0.95 and row.loc[8, "ci_upper"] > 1.6 * 1.05
