"""The bars a run is judged by (pass, stop, check), their intervals and decomposition."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from harness.prereg.schema.base import Name, Positive, PositiveInt, Strict


class SpeedBar(Strict):
    threshold: Positive = 2.0
    concurrencies: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4])
    statistic: Literal["point", "ci_lower"] = "point"
    best_drafter: Literal["per_task", "pooled"] = "per_task"
    require: Literal["every_task", "any_task"] = "every_task"


class IdentityBar(Strict):
    concurrency: PositiveInt = 1
    min_identical_share: Annotated[float, Field(ge=0, le=1)] = 1.0
    arms: Literal["best_drafter", "all_drafters"] = "best_drafter"
    # What "identical" reads (README, "Greedy identity"): `exact`, every output the same
    # text; `beyond_near_ties`, an output whose first divergent token was a near-tie of
    # the target's (logprob margin below near_tie_margin on either side) counts as
    # identical -- lossless up to numerics -- and is listed as `numeric`.
    count: Literal["exact", "beyond_near_ties"] = "exact"
    near_tie_margin: Annotated[float, Field(gt=0)] = 0.5


class AccuracyBar(Strict):
    tasks: list[Name]
    rule: Literal["within_baseline_wilson"] = "within_baseline_wilson"
    level: Annotated[float, Field(gt=0, lt=1)] = 0.95
    arms: Literal["best_drafter", "all_drafters"] = "best_drafter"


class KneeBar(Strict):
    required: bool = True  # the pass bar needs the knee of the best drafter(s) located
    # The knee is read on the point estimates (harness/analysis/knee.py). A point still
    # above 1.0 at the top registered level is a bound ("> 64"), and one already at or
    # below 1.0 at the first level a bound ("<= 1"): neither is a located crossing, so
    # not_located unless the study registers that such a bound passes.
    beyond_top: Literal["not_located", "pass"] = "not_located"
    below_first: Literal["not_located", "pass"] = "not_located"


class PassBar(Strict):
    speed: SpeedBar = Field(default_factory=SpeedBar)
    identity: IdentityBar | None = Field(default_factory=IdentityBar)
    accuracy: AccuracyBar | None = None
    knee: KneeBar = Field(default_factory=KneeBar)


class StopBar(Strict):
    threshold: Positive = 1.3
    concurrencies: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4])
    statistic: Literal["point", "ci_upper"] = "point"
    # Fires when the best drafter is below the threshold at every listed
    # concurrency, for every task (all_tasks) or for any task (any_task).
    fires_when: Literal["all_tasks", "any_task"] = "all_tasks"
    skip: Literal["remaining_speed_cells"] = "remaining_speed_cells"


class CheckBar(Strict):
    threshold: Positive = 5.0
    statistic: Literal["point"] = "point"
    action: Literal["rerun_baseline"] = "rerun_baseline"
    # The rerun agrees when the baseline's per-user speed differs by at most this share.
    agree_within: Annotated[float, Field(gt=0, lt=1)] = 0.10
    # How agreement is judged (harness/analysis/stop_check.py), every session of the
    # baseline rerun once. session_spread: the reruns' mean log speed against the
    # original sessions', within a two-sample t tolerance from the sessions' own spread
    # (at bars.intervals.level), never tighter than agree_within (a difference within
    # it always agrees; with one session a side no spread is measured and agree_within
    # alone judges). So a sound baseline disagrees at about the interval's error rate,
    # where a fixed +-10 % called the lab's sessions (log sd 0.086) "disagreeing" ~30 %
    # of the time. fixed_share: agree_within alone, on the means of the session medians.
    agreement: Literal["session_spread", "fixed_share"] = "session_spread"


class Intervals(Strict):
    level: Annotated[float, Field(gt=0, lt=1)] = 0.95
    # The interval over repeated sessions (harness/analysis/intervals.py). t_sessions: a
    # t interval on the paired sessions' log ratios; bootstrap: sessions resampled, then
    # units within them. auto: t_sessions below 30 sessions, bootstrap from there: a
    # percentile bootstrap over few sessions cannot reach past the extreme ones (its
    # "95 %" covered ~75 % at 3 sessions; benchmarks/interval_coverage.py). One session:
    # the within-session bootstrap, whatever this says, marked as such.
    method: Literal["auto", "t_sessions", "bootstrap"] = "auto"
    # The t interval's session variance (harness/analysis/pooling.py): per_level, each
    # level's own sessions (n - 1 df); stage_cells, pooled over the cells one engine start
    # measures (a plan stage's levels and tasks, per drafter arm), with Satterthwaite df,
    # where a test of equal spread across those cells holds, else per level.
    pooling: Literal["per_level", "stage_cells"] = "per_level"
    bootstrap_resamples: PositiveInt = 2000
    seed: int = 0


class Decomposition(Strict):
    # A speedup whose two factors (tokens per round, round cost: analysis/decompose.py)
    # explain it to worse than this share is flagged, and the report says which moved.
    tolerance: Annotated[float, Field(gt=0, lt=1)] = 0.05


class Bars(Strict):
    pass_: PassBar = Field(default_factory=PassBar, alias="pass")
    stop: StopBar = Field(default_factory=StopBar)
    check: CheckBar = Field(default_factory=CheckBar)
    intervals: Intervals = Field(default_factory=Intervals)
    decomposition: Decomposition = Field(default_factory=Decomposition)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
