"""Every bar outcome on hand-made run folders: PASS, FAIL (speed, identity, accuracy),
STOP and not-yet-judgeable, check fired with rerun agreeing / disagreeing / missing,
invalid cells excluded, INCOMPLETE on missing cells."""

from __future__ import annotations

import json

import pytest

from harness.analysis import check_bar_targets, judge_stop, write_verdict

from .runfolder import BASE_SPEED, IDENTITY_ITEMS, PASSING_SPEEDUPS, RunBuilder, study_dict


def bar(verdict: dict, name: str) -> dict:
    return next(b for b in verdict["bars"] if b["name"] == name)


@pytest.fixture
def passing(tmp_path) -> RunBuilder:
    return RunBuilder(tmp_path).full_passing_run()


def test_pass_writes_verdict_with_evidence(passing):
    v = write_verdict(passing.root)
    assert v["verdict"] == "PASS", v["reasons"]
    on_disk = json.loads((passing.root / "verdict.json").read_text())
    assert on_disk["verdict"] == "PASS" and on_disk["seal"] == "f" * 64
    assert {"seal", "verdict", "bars", "reruns"} <= set(on_disk)
    speed = bar(v, "pass.speed")
    assert speed["status"] == "pass"
    chat = speed["evidence"]["tasks"]["chat"]
    # DFlash has the highest minimum speedup over c=1,2,4 (2.5 vs 2.2 vs 1.6).
    assert chat["best_drafter"] == "sglang-dflash"
    assert chat["minima"] == pytest.approx({"vllm-ngram": 2.2, "vllm-eagle3": 1.6,
                                            "sglang-dflash": 2.5})
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
    v = write_verdict(b.root)
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
    v = write_verdict(b.root)
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
    assert write_verdict(b.root)["verdict"] == "PASS"


def test_fail_accuracy_outside_the_baseline_interval(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    b.identity_cells()
    b.accuracy_cells({"sglang-dflash": 50}, base_correct=70)
    v = write_verdict(b.root)
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
    return {arm: {1: 1.2, 2: 1.1, 4: 1.0, 8: 0.9, 16: 0.8} for arm in PASSING_SPEEDUPS}


def test_stop_fires_and_skipped_cells_are_reported(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells(stop_speedups(), levels=[1, 2, 4])
    decision = judge_stop(b.root, b.study)
    assert decision.fired is True
    assert decision.evidence["tasks"]["chat"]["below_threshold_everywhere"]
    b.manifest["stop"] = {"fired": True, "judged_wall": 1.0}
    b.manifest["skipped"] = [{"cell": f"{a['name']}/{t}/speed/c{c:03d}",
                              "reason": "stop bar fired"}
                             for a in b.study_data["arms"] for t in ("chat", "gsm8k")
                             for c in (8, 16)]
    b.write_manifest()
    b.identity_cells()
    b.accuracy_cells()
    v = write_verdict(b.root)
    assert v["verdict"] == "STOP"
    stop = bar(v, "stop")
    assert stop["status"] == "fired"
    assert len(stop["evidence"]["skipped_cells"]) == 20
    knees = {(k["arm"], k["task"]): k for k in bar(v, "pass.knee")["evidence"]["knees"]}
    # lower bounds ~1.2, ~1.1, ~1.0: the knee lies below c=4, wherever the bootstrap puts it
    assert knees[("vllm-ngram", "chat")]["status"] in ("located", "below_first")


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
    return study_dict(stop={"threshold": 1.3, "concurrencies": [1, 2, 4],
                            "fires_when": "any_task"})


def test_stop_not_judgeable_until_every_arms_early_cells_exist(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells(stop_speedups(), levels=[1, 2])
    d = judge_stop(b.root, b.study)
    assert d.fired is None
    missing = {x["cell"] for x in d.evidence["not_judgeable"]}
    assert "vllm-base/chat/speed/c004" in missing and "sglang-dflash/gsm8k/speed/c004" in missing
    json.dumps(d.evidence)  # the runner stores it in the manifest
    v = write_verdict(b.root)
    assert v["verdict"] == "INCOMPLETE"
    assert bar(v, "stop")["status"] == "not_judged"


def check_run(tmp_path) -> RunBuilder:
    fast = {arm: dict(by_c) for arm, by_c in PASSING_SPEEDUPS.items()}
    fast["sglang-dflash"][1] = 6.0
    b = RunBuilder(tmp_path)
    b.speed_cells(fast)
    b.identity_cells()
    b.accuracy_cells()
    return b


def test_check_fired_rerun_missing_is_incomplete(tmp_path):
    b = check_run(tmp_path)
    targets = check_bar_targets(b.root, b.study)
    assert targets == ["sglang-base/chat/speed/c001", "sglang-base/gsm8k/speed/c001"]
    v = write_verdict(b.root)
    assert v["verdict"] == "INCOMPLETE"
    check = bar(v, "check")
    assert check["status"] == "unresolved"
    assert {r["state"] for r in v["reruns"]} == {"missing"}
    assert "sglang-dflash/chat/speed/c001: 6.00x" in v["reruns"][0]["behind"]


def test_check_rerun_agreeing_accepts_the_verdict(tmp_path):
    b = check_run(tmp_path)
    for t in check_bar_targets(b.root, b.study):
        _, task, _, _ = t.split("/")
        b.speed("sglang-base", task, 1, BASE_SPEED * 1.05, cell_id=f"{t}/rerun1")
    assert check_bar_targets(b.root, b.study) == []
    v = write_verdict(b.root)
    assert v["verdict"] == "PASS", v["reasons"]
    check = bar(v, "check")
    assert check["status"] == "agreed"
    r = v["reruns"][0]
    assert r["state"] == "agrees" and r["relative_difference"] == pytest.approx(0.05)
    assert (r["cell"], r["of"]) == ("sglang-base/chat/speed/c001/rerun1",
                                    "sglang-base/chat/speed/c001")
    assert r["original_speed"] == pytest.approx(BASE_SPEED)
    assert "original" in check["evidence"]["baseline_used"]
    # the speed figure still uses the original baseline run
    chat = bar(v, "pass.speed")["evidence"]["tasks"]["chat"]
    assert chat["figures"][0]["speedup"] == pytest.approx(6.0)


def test_check_rerun_disagreeing_is_incomplete_and_says_which(tmp_path):
    b = check_run(tmp_path)
    b.speed("sglang-base", "chat", 1, BASE_SPEED * 1.05, cell_id="sglang-base/chat/speed/c001/rerun1")
    b.speed("sglang-base", "gsm8k", 1, BASE_SPEED * 1.3,
            cell_id="sglang-base/gsm8k/speed/c001/rerun1")
    v = write_verdict(b.root)
    assert v["verdict"] == "INCOMPLETE"
    states = {r["of"]: r["state"] for r in v["reruns"]}
    assert states == {"sglang-base/chat/speed/c001": "agrees",
                      "sglang-base/gsm8k/speed/c001": "disagrees"}
    assert any("gsm8k" in line and "disagrees" in line for line in bar(v, "check")["summary"])


@pytest.mark.parametrize("kind", ["unhealthy", "aborted"])
def test_invalid_cells_are_excluded_and_named(tmp_path, kind):
    b = RunBuilder(tmp_path).full_passing_run()
    flag = {"valid": False} if kind == "unhealthy" else {"aborted": True}
    b.speed("sglang-dflash", "chat", 2, BASE_SPEED * 2.8, **flag)
    v = write_verdict(b.root)
    assert v["verdict"] == "INCOMPLETE"
    assert [e["cell"] for e in v["excluded_cells"]] == ["sglang-dflash/chat/speed/c002"]
    reason = v["excluded_cells"][0]["reason"]
    assert ("client unhealthy" if kind == "unhealthy" else "aborted") in reason
    speed = bar(v, "pass.speed")
    assert speed["status"] == "incomplete"
    assert any("sglang-dflash/chat c=2: invalid" in m
               for m in speed["evidence"]["tasks"]["chat"]["missing"])


def test_missing_cells_make_the_verdict_incomplete(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells()
    b.accuracy_cells()  # no identity cells
    v = write_verdict(b.root)
    assert v["verdict"] == "INCOMPLETE"
    assert bar(v, "pass.identity")["status"] == "incomplete"
    assert bar(v, "pass.speed")["status"] == "pass"
    assert "pass.identity" in v["reasons"][0]


def test_missing_high_level_leaves_the_knee_incomplete(tmp_path):
    b = RunBuilder(tmp_path)
    b.speed_cells(levels=[1, 2, 4, 8])
    b.identity_cells()
    b.accuracy_cells()
    v = write_verdict(b.root)
    assert bar(v, "pass.knee")["status"] == "incomplete"
    assert v["verdict"] == "INCOMPLETE"


def test_identity_all_drafters_judges_every_drafter(tmp_path):
    study = study_dict()
    study["bars"]["pass"]["identity"]["arms"] = "all_drafters"
    b = RunBuilder(tmp_path, study)
    b.speed_cells()
    b.identity_cells({"vllm-eagle3": {i: "different" for i in IDENTITY_ITEMS}})
    b.accuracy_cells()
    v = write_verdict(b.root)
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
        results[statistic] = write_verdict(b.root)
    assert bar(results["point"], "pass.speed")["status"] == "pass"
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
    v = write_verdict(b.root)
    speed = bar(v, "pass.speed")
    tasks = speed["evidence"]["tasks"]
    assert tasks["chat"]["status"] == "pass" and tasks["gsm8k"]["status"] == "fail"
    assert tasks["chat"]["best_drafter"] == tasks["gsm8k"]["best_drafter"] == "sglang-dflash"
    assert speed["status"] == "pass" and v["verdict"] == "PASS"
