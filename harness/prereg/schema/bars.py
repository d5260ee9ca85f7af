"""The bars a run is judged by (pass, stop, check), their intervals and decomposition."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from harness.prereg.schema.base import Name, Positive, PositiveInt, Strict


class SpeedBar(Strict):
    """Speed passes on a task when its best drafter's speedup (per-user speed over its
    baseline's, same engine, task and level) holds the threshold at every listed level."""

    threshold: Positive = Field(2.0, description="The speedup (x) the best drafter must reach.")
    concurrencies: list[PositiveInt] = Field(
        default_factory=lambda: [1, 2, 4],
        description="The closed-loop levels it must hold at, each a registered level.",
    )
    statistic: Literal["point", "ci_lower"] = Field(
        "point",
        description="What is compared with the threshold, and ranks the drafters:"
        " the speedup's point estimate, or its interval's lower bound.",
    )
    best_drafter: Literal["per_task", "pooled"] = Field(
        "per_task",
        description="The best drafter is the one with the highest minimum"
        " `statistic` over `concurrencies`: chosen per speed task, or"
        " once over all speed tasks pooled. Control arms are never"
        " candidates.",
    )
    require: Literal["every_task", "any_task"] = Field(
        "every_task", description="Whether speed must pass on every speed task or on any."
    )


class IdentityBar(Strict):
    """Greedy identity: on each identity task, the judged drafters' texts compared prompt by
    prompt with their baseline's (docs: How the bars are read, What "identical" reads)."""

    concurrency: PositiveInt = Field(1, description="The users identity cells run at.")
    min_identical_share: Annotated[float, Field(ge=0, le=1)] = Field(
        1.0, description="The share of compared prompts that must be identical to pass."
    )
    arms: Literal["best_drafter", "all_drafters"] = Field(
        "best_drafter",
        description="Which drafters are judged: the pass bar's best drafter"
        " of the task (on a task without speed cells, every"
        " drafter best on some speed task), or every drafter.",
    )
    # Speculative decoding is lossless only up to numerics: the verification pass rounds
    # differently from a one-token step.
    count: Literal["exact", "beyond_near_ties"] = Field(
        "exact",
        description='What "identical" reads: `exact`, the same text;'
        " `beyond_near_ties`, an output whose first divergent token was a"
        " near-tie of the target's (logprob margin below near_tie_margin"
        " on either side) counts as identical and is listed as"
        " `numeric`.",
    )
    near_tie_margin: Annotated[float, Field(gt=0)] = Field(
        0.5,
        description="The target's logprob margin (top-1 minus top-2, in nats) below"
        " which a divergent token is a near-tie.",
    )


class AccuracyBar(Strict):
    """Accuracy: a judged drafter's score lies within its baseline's interval."""

    tasks: list[Name] = Field(description="The tasks judged, each with the accuracy use.")
    rule: Literal["within_baseline_wilson"] = Field(
        "within_baseline_wilson",
        description="The drafter arm's accuracy lies inside the"
        " no-drafter arm's Wilson interval on the same"
        " items.",
    )
    level: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.95, description="That interval's confidence level."
    )
    arms: Literal["best_drafter", "all_drafters"] = Field(
        "best_drafter", description="Which drafters are judged, as for identity."
    )


class KneeBar(Strict):
    """The knee: where the best drafter's speedup crosses 1.0, read on the point estimates
    and interpolated in log2(concurrency) (harness/analysis/knee.py)."""

    required: bool = Field(
        True, description="The pass bar needs the best drafter(s)' knee located."
    )
    # Neither bound is a located crossing.
    beyond_top: Literal["not_located", "pass"] = Field(
        "not_located",
        description="A speedup still above 1.0 at the top registered level is"
        ' a bound ("> 64"): `not_located`, or `pass` if the study'
        " registers that such a bound passes.",
    )
    below_first: Literal["not_located", "pass"] = Field(
        "not_located",
        description="A speedup already at or below 1.0 at the first level is a"
        ' bound ("<= 1"): `not_located`, or `pass`.',
    )


class PassBar(Strict):
    """PASS when every registered part passes (and nothing stopped or is incomplete)."""

    speed: SpeedBar = Field(default_factory=SpeedBar, description="The speed bar.")
    identity: IdentityBar | None = Field(
        default_factory=IdentityBar, description="The identity bar; null: not judged."
    )
    accuracy: AccuracyBar | None = Field(None, description="The accuracy bar; null: not judged.")
    knee: KneeBar = Field(default_factory=KneeBar, description="The knee bar.")


class StopBar(Strict):
    """Stop fires on a task when no drafter reaches the threshold at any listed level;
    judged once those cells are measured, before the higher levels' GPU time is spent."""

    threshold: Positive = Field(1.3, description="The speedup (x) some drafter must reach.")
    concurrencies: list[PositiveInt] = Field(
        default_factory=lambda: [1, 2, 4],
        description="The closed-loop levels read, each a registered level.",
    )
    statistic: Literal["point", "ci_upper"] = Field(
        "point", description="The speedup's point estimate, or its interval's upper bound."
    )
    fires_when: Literal["all_tasks", "any_task"] = Field(
        "all_tasks",
        description="The study stops when every speed task's stop fires, or any task's.",
    )
    skip: Literal["remaining_speed_cells"] = Field(
        "remaining_speed_cells", description="What a stop skips: the speed cells not yet measured."
    )


class CheckBar(Strict):
    """Check fires when any speedup is above the threshold: the baseline cells behind it
    are run again (every session once), and the result is accepted only if they agree."""

    threshold: Positive = Field(5.0, description="The speedup (x) above which it fires.")
    statistic: Literal["point"] = Field("point", description="The speedup's point estimate.")
    action: Literal["rerun_baseline"] = Field(
        "rerun_baseline",
        description="What firing does: the baseline cells behind the"
        " figure are measured again, both runs kept.",
    )
    agree_within: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.10,
        description="A rerun whose baseline per-user speed differs by at most this"
        " share always agrees.",
    )
    # A fixed +-10 % called the lab's sessions (log sd 0.086) "disagreeing" ~30 % of the
    # time; session_spread disagrees on a sound baseline at about the interval's error rate.
    agreement: Literal["session_spread", "fixed_share"] = Field(
        "session_spread",
        description="How agreement is judged (harness/analysis/"
        "stop_check.py). `session_spread`: the reruns' mean log"
        " speed against the original sessions', within a"
        " two-sample t tolerance from the sessions' own spread"
        " (at bars.intervals.level), never tighter than"
        " agree_within (one session a side: agree_within"
        " alone). `fixed_share`: agree_within alone, on the"
        " means of the session medians.",
    )


class Intervals(Strict):
    """The speedup's interval (docs: Sessions and intervals)."""

    level: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.95, description="The intervals' confidence level."
    )
    # A percentile bootstrap over few sessions cannot reach past the extreme ones: its
    # "95 %" covered ~75 % at 3 sessions (benchmarks/interval_coverage.py).
    method: Literal["auto", "t_sessions", "bootstrap"] = Field(
        "auto",
        description="The interval over repeated sessions"
        " (harness/analysis/intervals.py). `t_sessions`: a t interval on"
        " the paired sessions' log ratios; `bootstrap`: sessions"
        " resampled, then units within them; `auto`: t_sessions below 30"
        " sessions, bootstrap from there. One session: the"
        " within-session bootstrap, whatever this says, marked as such.",
    )
    pooling: Literal["per_level", "stage_cells"] = Field(
        "per_level",
        description="The t interval's session variance"
        " (harness/analysis/pooling.py). `per_level`: each level's"
        " own sessions (n - 1 df); `stage_cells`: pooled over the"
        " cells one engine start measures (a plan stage's levels and"
        " tasks, per drafter arm), with Satterthwaite df, where a"
        " test of equal spread across those cells holds, else per"
        " level.",
    )
    bootstrap_resamples: PositiveInt = Field(2000, description="Resamples per bootstrap interval.")
    seed: int = Field(0, description="Seeds the bootstrap.")


class Decomposition(Strict):
    """A speedup as tokens per round x round cost (analysis/decompose.py)."""

    tolerance: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.05,
        description="A speedup whose two factors explain it to worse than this share is"
        " flagged, and the report says which factor moved.",
    )


class Bars(Strict):
    """The bars a run is judged by (docs: How the bars are read)."""

    pass_: PassBar = Field(default_factory=PassBar, alias="pass", description="What a PASS needs.")
    stop: StopBar = Field(default_factory=StopBar, description="When the study stops early.")
    check: CheckBar = Field(
        default_factory=CheckBar, description="When a speedup is too good to accept unchecked."
    )
    intervals: Intervals = Field(
        default_factory=Intervals, description="How every bar's intervals are taken."
    )
    decomposition: Decomposition = Field(
        default_factory=Decomposition, description="The speedup's decomposition check."
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
