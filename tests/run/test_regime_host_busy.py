"""The smoke's regime timing is judged for a busy host like a cell: a level timed while
other work took the host's CPU is timed again, and one busy after every try is said."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.run.regime as regime_mod
from harness.measure.host_cpu import HostCpu
from harness.measure.requests import RequestSpec
from harness.prereg import load_study
from harness.records import RequestRecord
from harness.testengine.server import serve_in_thread

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scripted-pass.yaml"
PROMPTS = [
    RequestSpec(item_id=f"p{i}", messages=[{"role": "user", "content": f"say {i}"}], max_tokens=8)
    for i in range(2)
]


class FakeMeter:
    """HostCpuMeter with the shares a test dictates, one per timing, in order."""

    shares: list[float] = []
    groups: list[int | None] = []

    def __init__(self, engine_group: int | None) -> None:
        FakeMeter.groups.append(engine_group)

    def start(self) -> None:
        pass

    def finish(self) -> HostCpu:
        return HostCpu(foreign_share=FakeMeter.shares.pop(0), steal_share=0.01, engine_counted=True)


def study(limit: float | None, retries: int = 2):
    s = load_study(EXAMPLE)
    rec = s.recording.model_copy(update={"host_foreign_cpu_limit": limit, "cell_retries": retries})
    return s.model_copy(update={"recording": rec})


@pytest.fixture
def meter(monkeypatch):
    monkeypatch.setattr(regime_mod, "HostCpuMeter", FakeMeter)
    FakeMeter.groups = []
    return FakeMeter


def time_regime(s, base_url: str):
    seen: list[RequestRecord] = []
    rec = regime_mod.measure_regime(
        s, "base", "k", base_url, "scripted", PROMPTS, on_record=seen.append, engine_group=4242
    )
    return rec, seen


def test_a_level_timed_beside_other_work_is_timed_again_and_the_quiet_timing_kept(meter):
    s = study(limit=0.25)
    levels = regime_mod.regime_levels(s)
    assert levels[0] == 1 and len(levels) >= 2
    # One user: busy (0.40 + 0.01 steal), then quiet; every other level quiet at once.
    meter.shares = [0.40, 0.02] + [0.02] * (len(levels) - 1)
    spec = s.arm("base").scripted
    with serve_in_thread(spec) as eng:
        rec, seen = time_regime(s, eng.base_url)
    assert meter.shares == [] and set(meter.groups) == {4242}  # the engine's CPU is its own
    one = rec.levels[0]
    assert (one.users, one.attempts, one.host_busy) == (1, 2, False)
    assert one.host_busy_share == pytest.approx(0.03)
    assert all(lv.attempts == 1 and lv.host_busy is False for lv in rec.levels[1:])
    # Both timings of one user were made (attempt 1 then 2); the step is the second's.
    attempts = sorted({r.attempt for r in seen if r.cell_id.endswith("/c001")})
    assert attempts == [1, 2]
    assert rec.host_busy_limit == 0.25 and "other work" not in rec.line()


def test_a_level_busy_after_every_try_is_kept_and_the_line_says_so(meter):
    s = study(limit=0.25, retries=1)
    levels = regime_mod.regime_levels(s)
    meter.shares = [0.02] + [0.60, 0.55] + [0.02] * (len(levels) - 2)
    with serve_in_thread(s.arm("base").scripted) as eng:
        rec, _ = time_regime(s, eng.base_url)
    two = rec.levels[1]
    assert (two.attempts, two.host_busy) == (2, True) and two.host_busy_share == pytest.approx(0.56)
    assert rec.line().endswith(
        f"(timed while other work took the host's CPU: {two.users} users"
        " 0.56, above the limit 0.25 after every try)"
    ), rec.line()


def test_without_a_registered_limit_each_level_is_timed_once(meter):
    s = study(limit=None)
    levels = regime_mod.regime_levels(s)
    meter.shares = [0.90] * len(levels)  # busy, but nothing is registered to judge it by
    with serve_in_thread(s.arm("base").scripted) as eng:
        rec, _ = time_regime(s, eng.base_url)
    assert [lv.attempts for lv in rec.levels] == [1] * len(levels)
    assert all(lv.host_busy is False for lv in rec.levels)
    assert rec.host_busy_limit is None and "other work" not in rec.line()
