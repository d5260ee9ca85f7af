"""The host's regime as the run folder keeps it (manifest.json's `regime`, and
smoke/regime.jsonl): a baseline's plain step by level, and the sentence it gives.
Judged by harness.analysis.regime; timed by harness.run.regime."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class RegimeLevel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: int
    step_ms: float | None  # median gap per token between chunks (None: nothing timed)
    ratio: float | None  # step_ms / the one-user step_ms
    requests: int  # measured requests with at least two chunks
    # Under recording.host_foreign_cpu_limit: the share of the host's CPU that other
    # processes and the hypervisor took while the level was timed (its last timing), and
    # whether that was above the limit after every try (None: not measured).
    host_busy_share: float | None = None
    host_busy: bool | None = None
    attempts: int = 1


class BaselineRegime(BaseModel):
    """One baseline's plain step by level, and what it says about the host."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["regime"] = "regime"
    arm: str
    key: str  # the arm's smoke key: a resume keeps a record whose key is unchanged
    wall: float
    max_tokens: int
    max_step_ratio: float  # the registered tolerance
    levels: list[RegimeLevel]
    compute_bound_at: list[int]  # levels whose ratio is above the tolerance
    # True: every pass level within the tolerance; False: some level above it;
    # None: nothing to judge (one level, or a level without a step time).
    memory_bound: bool | None
    host_busy_limit: float | None = None  # recording.host_foreign_cpu_limit when timed

    def line(self) -> str:
        """One sentence for the verdict page."""
        busy = [lv for lv in self.levels if lv.host_busy]
        if not busy:
            return self._judgement()
        shares = ", ".join(f"{lv.users} users {lv.host_busy_share:.2f}" for lv in busy)
        return (
            f"{self._judgement()} (timed while other work took the host's CPU: {shares},"
            f" above the limit {self.host_busy_limit:g} after every try)"
        )

    def _judgement(self) -> str:
        one = next((lv for lv in self.levels if lv.users == 1), None)
        if self.memory_bound is None or one is None or one.step_ms is None:
            timed = (
                ", ".join(
                    f"{lv.users} users {lv.step_ms:.1f} ms"
                    for lv in self.levels
                    if lv.step_ms is not None
                )
                or "no step timed"
            )
            return (
                f"Host regime: not judged for {self.arm} (plain step: {timed}; needs one"
                " user and a pass level, each timed)"
            )
        if self.memory_bound:
            worst = max((lv for lv in self.levels if lv.users != 1), key=lambda lv: lv.ratio or 0.0)
            return (
                f"Host regime: memory-bound at the pass levels: {self.arm}'s plain step"
                f" x{worst.ratio:.2f} at {worst.users} users against one ({one.step_ms:.1f}"
                f" -> {worst.step_ms:.1f} ms; tolerance x{self.max_step_ratio:g})"
            )
        first = min(self.compute_bound_at)
        at = next(lv for lv in self.levels if lv.users == first)
        return (
            f"This host is compute-bound at {first} users: step x{at.ratio:.1f}"
            f" ({self.arm}'s plain step {one.step_ms:.1f} -> {at.step_ms:.1f} ms; tolerance"
            f" x{self.max_step_ratio:g}); speculation cannot pay here"
        )
