"""The interval maths on synthetic cells: units within a session, sessions first across them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.analysis.intervals import (
    Units,
    bootstrap_medians,
    interval_caveat,
    session_ratio,
    session_spread,
    session_units,
)
from harness.analysis.load import CellData
from harness.prereg.schema import Intervals
from harness.records import RequestRecord

IV = Intervals(level=0.95, bootstrap_resamples=2000, seed=5)
TOKENS = 101


def _request(i: int, speed: float, user: int | None, start: float) -> RequestRecord:
    span = (TOKENS - 1) / speed
    return RequestRecord(
        cell_id="x",
        index=i,
        item_id=str(i),
        user=user,
        scheduled_t=start,
        sent_t=start,
        first_token_t=start + 0.01,
        end_t=start + 0.01 + span,
        completion_tokens=TOKENS,
        chunk_times=[start + 0.01 + span * k / 10 for k in range(11)],
        chunk_tokens=[1, *[10] * 10],
    )


def cell(speeds: list[float], users: int | None = 2, kind: str = "speed") -> CellData:
    """Requests in time order; request i belongs to user i % users (None: no users)."""
    recs = [
        _request(i, s, None if users is None else i % users, float(i)) for i, s in enumerate(speeds)
    ]
    return CellData("x", "a", "t", kind, users, None, 1, "complete", requests=recs)


def test_closed_loop_resamples_users_with_all_their_requests():
    u = session_units(cell([10, 20, 11, 21, 12, 22], users=2))
    assert u.kind == "user" and u.n_units == 2
    # Sorted speeds, each with its user: user 0 sent 10, 11, 12; user 1 20, 21, 22.
    assert np.round(u.values, 6).tolist() == [10, 11, 12, 20, 21, 22]
    assert u.unit_of.tolist() == [0, 0, 0, 1, 1, 1]
    meds = bootstrap_medians(u, np.random.default_rng(0), 4000)
    # A resample is {u0, u0}, {u0, u1} or {u1, u1}: medians 11, 16 or 21 only, and
    # never a mix of requests that splits a user (independent requests would give 10.5...).
    assert set(np.round(meds, 6)) == {11.0, 16.0, 21.0}
    share = {v: float(np.mean(meds == v)) for v in (11.0, 16.0, 21.0)}
    assert share[16.0] == pytest.approx(0.5, abs=0.03)


def test_one_user_and_open_loop_resample_time_blocks():
    one = session_units(cell([float(v) for v in range(1, 10)], users=1))
    assert one.kind == "time block" and one.n_units == 3  # ceil(sqrt(9)) blocks of 3
    # Blocks are contiguous in time: requests 0-2, 3-5, 6-8 (speeds rise with time).
    assert one.unit_of.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    open_loop = session_units(cell([float(v) for v in range(1, 11)], users=None, kind="open"))
    assert open_loop.kind == "time block" and open_loop.n_units == 4  # ceil(sqrt(10))
    assert open_loop.unit_of.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    # Hand-made closed-loop records without users: each request is its own unit.
    bare = session_units(cell([1.0, 2.0, 3.0], users=None))
    assert bare.kind == "request" and bare.n_units == 3


def test_weighted_medians_equal_numpy_medians_of_the_resampled_requests():
    rng = np.random.default_rng(1)
    values = np.sort(rng.uniform(10, 20, size=11))
    unit_of = np.array([0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 4])[np.argsort(rng.uniform(size=11))]
    u = Units(values, unit_of, 5, "user")
    meds = bootstrap_medians(u, np.random.default_rng(7), 50)
    again = np.random.default_rng(7)
    counts = again.multinomial(5, np.full(5, 0.2), size=50)
    for m, draw in zip(meds, counts, strict=True):
        expanded = np.concatenate([values[unit_of == k].repeat(n) for k, n in enumerate(draw)])
        assert m == pytest.approx(float(np.median(expanded)))


def _sessions(
    rng: np.random.Generator, base: float, factors: list[float], n: int = 24
) -> list[Units]:
    return [
        session_units(cell(list(base * f * rng.normal(1.0, 0.01, size=n)), users=4))
        for f in factors
    ]


def test_sessions_widen_the_interval_where_they_disagree():
    rng = np.random.default_rng(3)
    # The drafter is 1.5x on two sessions and 1.0x on the third: within each session the
    # gain looks certain; over the sessions it does not.
    drafter = _sessions(rng, 150.0, [1.0, 1.0, 0.667])
    baseline = _sessions(rng, 100.0, [1.0, 1.0, 1.0])
    r = session_ratio(drafter, baseline, IV, key="k")
    assert r is not None and r.sessions == 3 and r.unit == "user"
    assert r.point == pytest.approx((150 + 150 + 100) / 3 / 100, rel=0.01)
    within, two = r.within_upper - r.within_lower, r.ci_upper - r.ci_lower
    assert within < 0.03 and two > 10 * within
    assert r.within_lower > 1.3  # what one level of resampling would claim
    assert r.ci_lower < 1.05  # the sessions' interval reaches down to no gain
    assert r.ci_lower <= r.within_lower <= r.point <= r.within_upper <= r.ci_upper
    assert [round(v / 50) * 50 for v in r.speeds_drafter] == [150, 150, 100]
    # Seeded by the study's seed and the pair's key: the same figures every time.
    assert session_ratio(drafter, baseline, IV, key="k") == r
    assert session_ratio(drafter, baseline, IV, key="other") != r


def test_sessions_that_agree_get_the_t_interval_on_their_log_ratios():
    """Three sessions off +-2 %: the interval is exp(mean +- t_2 sd / sqrt(3)) of the
    sessions' log ratios (t_2 = 4.3027 from any table), not the two-level bootstrap's
    (which cannot reach past the extreme sessions) nor the within-session one."""
    rng = np.random.default_rng(4)
    drafter = _sessions(rng, 150.0, [1.02, 0.98, 1.0])
    baseline = _sessions(rng, 100.0, [0.99, 1.01, 1.0])
    r = session_ratio(drafter, baseline, IV, key="k")
    assert r is not None
    logs = np.log(
        [np.median(d.values) / np.median(b.values) for d, b in zip(drafter, baseline, strict=True)]
    )
    half = 4.302653 * logs.std(ddof=1) / np.sqrt(3)
    assert r.method == "t_sessions"
    assert (r.ci_lower, r.ci_upper) == (
        pytest.approx(np.exp(logs.mean() - half), rel=1e-6),
        pytest.approx(np.exp(logs.mean() + half), rel=1e-6),
    )
    boot = session_ratio(drafter, baseline, IV.model_copy(update={"method": "bootstrap"}), "k")
    assert boot is not None
    assert boot.method == "bootstrap"
    assert r.ci_upper - r.ci_lower > 1.5 * (boot.ci_upper - boot.ci_lower)
    assert r.ci_upper - r.ci_lower > 1.5 * (r.within_upper - r.within_lower)


def test_one_session_uses_its_within_session_interval_and_the_plain_median_ratio():
    rng = np.random.default_rng(5)
    d, b = _sessions(rng, 150.0, [1.0]), _sessions(rng, 100.0, [1.0])
    r = session_ratio(d, b, IV)
    assert r is not None and r.sessions == 1
    assert (r.ci_lower, r.ci_upper) == (r.within_lower, r.within_upper)
    assert r.point == pytest.approx(float(np.median(d[0].values) / np.median(b[0].values)))
    # A session without a single speed, or unpaired sessions, give no figure.
    empty = session_units(cell([], users=2))
    assert session_ratio([empty], b, IV) is None
    assert session_ratio(d + d, b, IV) is None


def test_spread_and_caveats():
    assert session_spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)
    assert session_spread([100.0]) is None
    assert interval_caveat(3, 24, 30) is None
    one = "one session (session variation not in the interval)"
    assert interval_caveat(1, 64, 64) == one
    assert interval_caveat(3, 19, 30) == (
        "fewer than 20 measured requests (drafter 19, baseline 30)"
    )
    assert interval_caveat(1, 8, 8) == (
        f"{one}; fewer than 20 measured requests (drafter 8, baseline 8)"
    )


def test_stop_bar_waits_for_every_session_and_the_table_pairs_them(tmp_path):
    """A synthetic folder registering 2 sessions: with only the first measured the stop
    bar is not judgeable; with the second (slower drafter sessions) the figure pools both."""
    from harness.analysis import judge_stop
    from harness.analysis.load import load_run
    from harness.analysis.speedup import speedup_table

    from .runfolder import BASE_SPEED, LEVELS, PASSING_SPEEDUPS, RunBuilder, study_dict

    study = study_dict()
    study["recording"] = {"sessions": 2, "sessions_for": "pass_cells"}
    b = RunBuilder(tmp_path, study)
    for task in ("chat", "gsm8k"):  # session 1 alone, every arm at its figure
        for c in LEVELS:
            for arm in ("vllm-base", "sglang-base"):
                b.speed(arm, task, c, BASE_SPEED)
            for arm, by_c in PASSING_SPEEDUPS.items():
                b.speed(arm, task, c, BASE_SPEED * by_c[c])
    waiting = judge_stop(b.root)
    assert waiting.fired is None
    missing = {c["cell"] for c in waiting.evidence["not_judgeable"]}
    assert (
        "vllm-base/chat/speed/c001/s2" in missing and "sglang-dflash/gsm8k/speed/c004/s2" in missing
    )
    assert not any(c.endswith("c008/s2") for c in missing)  # c = 8 is measured once
    for task in ("chat", "gsm8k"):
        for c in (1, 2, 4):
            for arm in ("vllm-base", "sglang-base"):
                b.speed(arm, task, c, BASE_SPEED, cell_id=f"{arm}/{task}/speed/c{c:03d}/s2")
            for arm, by_c in PASSING_SPEEDUPS.items():
                # The drafters' second sessions run 20 % slower.
                b.speed(
                    arm,
                    task,
                    c,
                    BASE_SPEED * by_c[c] * 0.8,
                    cell_id=f"{arm}/{task}/speed/c{c:03d}/s2",
                )
    assert judge_stop(b.root).fired is False
    sp = speedup_table(load_run(b.root)).set_index(["arm", "task", "concurrency"])
    row = sp.loc[("sglang-dflash", "chat", 1)]
    assert row["sessions"] == 2 and row["speedup"] == pytest.approx(3.0 * 0.9, rel=1e-3)
    assert pd.isna(row["interval_caveat"]) and row["n_drafter"] == 42
    assert row["session_spread_drafter"] == pytest.approx(0.2 / 0.9, rel=1e-3)
    assert row["ci_lower"] < row["ci_lower_within"]
    once = sp.loc[("sglang-dflash", "chat", 8)]
    assert once["sessions"] == 1 and once["interval_caveat"].startswith("one session (")
    assert once["ci_lower"] == once["ci_lower_within"] and once["interval_method"] == "within"
    assert row["interval_method"] == "t_sessions"


def test_t_quantiles_match_the_tables():
    from harness.analysis.intervals import t_quantile

    # Two-sided 95 %: 12.706 (df 1), 4.303 (2), 2.776 (4), 2.228 (10), 2.042 (30); 90 % df 2.
    got = [round(t_quantile(0.95, df), 3) for df in (1, 2, 4, 10, 30)]
    assert got == [12.706, 4.303, 2.776, 2.228, 2.042]
    assert round(t_quantile(0.90, 2), 3) == 2.920 and round(t_quantile(0.99, 4), 3) == 4.604
    assert abs(t_quantile(0.95, 2000) - 1.960) < 0.002  # the normal's, far out


def test_three_sessions_take_a_t_interval_on_their_log_ratios():
    rng = np.random.default_rng(6)
    drafter = _sessions(rng, 150.0, [1.05, 0.97, 1.0])
    baseline = _sessions(rng, 100.0, [0.98, 1.02, 1.0])
    r = session_ratio(drafter, baseline, IV, key="k")
    assert r is not None
    assert r.method == "t_sessions"
    logs = np.log(np.array(r.speeds_drafter) / np.array(r.speeds_baseline))
    half = 4.302653 * logs.std(ddof=1) / np.sqrt(3)
    assert r.ci_lower == pytest.approx(np.exp(logs.mean() - half), rel=1e-5)
    assert r.ci_upper == pytest.approx(np.exp(logs.mean() + half), rel=1e-5)
    # The registered bootstrap reading gives the old two-level interval, narrower here.
    boot = session_ratio(drafter, baseline, IV.model_copy(update={"method": "bootstrap"}), "k")
    assert boot is not None
    assert boot.method == "bootstrap" and boot.ci_upper - boot.ci_lower < r.ci_upper - r.ci_lower
    assert (boot.within_lower, boot.within_upper) != (None, None)
    # auto turns to the bootstrap only from 30 sessions.
    from harness.analysis.intervals import BOOTSTRAP_FROM_SESSIONS, interval_method

    assert BOOTSTRAP_FROM_SESSIONS == 30
    assert [interval_method(IV, n) for n in (1, 2, 29, 30)] == [
        "within",
        "t_sessions",
        "t_sessions",
        "bootstrap",
    ]
    t_only = IV.model_copy(update={"method": "t_sessions"})
    assert interval_method(t_only, 40) == "t_sessions" and interval_method(t_only, 1) == "within"


def test_another_figure_of_the_same_requests_is_read_under_the_same_units():
    u = session_units(cell([10, 20, 11, 21, 12, 22], users=2))
    # A figure per request in time order (rows 0..5), NaN where a request has none.
    other = u.with_values(np.array([5.0, 1.0, 4.0, np.nan, 3.0, 2.0]))
    assert other.values.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert other.unit_of.tolist() == [1, 1, 0, 0, 0]  # user 1 sent rows 1 and 5
    assert other.n_units == 2
