"""A sharded run as the manifest keeps it: the plan (`sharding`) and each shard as the
driver saw it (harness.run.ray_executor)."""

from __future__ import annotations

from harness.rundir import MeasuredOn
from harness.rundir.engines import EngineEnvironment, RunGpuTelemetry
from harness.rundir.record import RunRecord
from harness.rundir.schedule import SmokeSummary


class ShardUnit(RunRecord):
    arms: list[str]
    tasks: list[str]


class ShardPlan(RunRecord):
    name: str
    units: list[ShardUnit]


class Sharding(RunRecord):
    gpus: int
    slots: int
    shards: list[ShardPlan]


class ShardWorkerRecord(RunRecord):
    pid: int
    where: MeasuredOn
    folder: str
    started_wall: float


class ShardRecord(RunRecord):
    """One shard as the driver saw it: its workers, where they ran, their facts."""

    status: str | None = None
    status_wall: float | None = None
    error: str | None = None
    where: MeasuredOn | None = None
    workers: list[ShardWorkerRecord] = []
    smoke: SmokeSummary | None = None
    gpu_telemetry: RunGpuTelemetry | None = None
    engine_environments: dict[str, EngineEnvironment] | None = None
