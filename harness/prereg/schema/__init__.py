"""The pre-registration: every field a study fixes before GPU time is spent.

Strict throughout: an unknown key is an error (a typo such as `concurency:` must
never be silently ignored), and every default is written out in the seal.

A module per part of a study (base, target, arms, loads, tasks, recording, bars,
surface, study); the names are re-exported here, where the rest of the harness
imports them.
"""

from harness.prereg.schema.arms import (
    Arm,
    Attach,
    Drafter,
    DrafterExpect,
    KRange,
    Launch,
    SyntheticAcceptance,
    k_schedule_problem,
)
from harness.prereg.schema.bars import (
    AccuracyBar,
    Bars,
    CheckBar,
    Decomposition,
    IdentityBar,
    Intervals,
    KneeBar,
    PassBar,
    SpeedBar,
    StopBar,
)
from harness.prereg.schema.base import (
    EngineName,
    Name,
    Positive,
    PositiveInt,
    Strict,
    TaskUse,
    registered_engine,
)
from harness.prereg.schema.design import Design, design_problems
from harness.prereg.schema.loads import (
    ClosedLoopSpec,
    LatencyObjective,
    Loads,
    OpenLoopSpec,
    RequestCount,
)
from harness.prereg.schema.recording import Recording, RegimeCheck
from harness.prereg.schema.study import CrossReferenceError, PlanEstimate, Study
from harness.prereg.schema.surface import (
    SCHEDULE_PREFIX,
    SURFACE_PREFIX,
    Surface,
    schedule_arm_name,
    surface_arm_name,
)
from harness.prereg.schema.target import Hardware, ModelSpec
from harness.prereg.schema.tasks import (
    SPEED_BENCH_DATASET,
    HubSource,
    Sampling,
    SpeedBenchConfig,
    TaskSpec,
)

__all__ = [
    "SCHEDULE_PREFIX",
    "SPEED_BENCH_DATASET",
    "SURFACE_PREFIX",
    "AccuracyBar",
    "Arm",
    "Attach",
    "Bars",
    "CheckBar",
    "ClosedLoopSpec",
    "CrossReferenceError",
    "Decomposition",
    "Design",
    "Drafter",
    "DrafterExpect",
    "EngineName",
    "Hardware",
    "HubSource",
    "IdentityBar",
    "Intervals",
    "KRange",
    "KneeBar",
    "LatencyObjective",
    "Launch",
    "Loads",
    "ModelSpec",
    "Name",
    "OpenLoopSpec",
    "PassBar",
    "PlanEstimate",
    "Positive",
    "PositiveInt",
    "Recording",
    "RegimeCheck",
    "RequestCount",
    "Sampling",
    "SpeedBar",
    "SpeedBenchConfig",
    "StopBar",
    "Strict",
    "Study",
    "Surface",
    "SyntheticAcceptance",
    "TaskSpec",
    "TaskUse",
    "design_problems",
    "k_schedule_problem",
    "registered_engine",
    "schedule_arm_name",
    "surface_arm_name",
]
