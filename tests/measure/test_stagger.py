"""Staggered warm-ups: users of equal-length requests do not end in lockstep."""

from __future__ import annotations

import pytest

from harness.measure.patterns import ClosedLoop
from harness.testengine.server import serve_in_thread
from harness.testengine.spec import ScriptedEngineSpec

from .cells import prompts, run


def test_first_round_warmups_are_cut_to_shares_of_max_tokens() -> None:
    loop = ClosedLoop(concurrency=4, requests=8, warmup=8, stagger_warmup=True)
    assert [loop.max_tokens_for(i, 32) for i in range(10)] == [
        8,
        16,
        24,
        32,
        32,
        32,
        32,
        32,
        32,
        32,
    ]
    plain = ClosedLoop(concurrency=4, requests=8, warmup=8)
    assert [plain.max_tokens_for(i, 32) for i in range(4)] == [32] * 4
    assert (
        ClosedLoop(concurrency=1, requests=8, warmup=1, stagger_warmup=True).max_tokens_for(0, 32)
        == 32
    )  # one user: nothing to stagger


def most_ending_together(records, step_s: float) -> int:
    """The most measured requests that ended within one engine step of each other."""
    ends = sorted(r.end_t for r in records if r.phase == "measure")
    return max(sum(1 for e in ends if t <= e < t + step_s) for t in ends)


@pytest.mark.timing
@pytest.mark.parametrize("stagger", [False, True])
def test_staggered_users_end_on_different_steps(stagger: bool) -> None:
    # 10 ms steps, 16 users, 32-token requests: in lockstep most of the 16 end within one
    # step; staggered, their ends are spread over the request's 32 steps.
    spec = ScriptedEngineSpec(weight_bytes=1e10, bandwidth_bytes_per_s=1e12)
    with serve_in_thread(spec) as eng:
        outcome, records = run(
            eng.base_url,
            ClosedLoop(concurrency=16, requests=32, warmup=16, stagger_warmup=stagger),
            requests=prompts(max_tokens=32),
            lag_limit_ms=1000,
        )
    warm = sorted(r.completion_tokens or 0 for r in records if r.phase == "warmup")
    measured = [r for r in records if r.phase == "measure"]
    assert all(r.ok and r.completion_tokens == 32 for r in measured)
    if stagger:
        assert warm == list(range(2, 33, 2))
        assert most_ending_together(records, 0.01) <= 3  # measured 1-2 of 16
    else:
        assert warm == [32] * 16
        assert most_ending_together(records, 0.01) >= 5  # measured 6-13 of 16
    assert outcome.health is not None
    assert outcome.health.delivered_share is not None
    assert outcome.health.delivered_share > 0.9
