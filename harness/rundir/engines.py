"""The engines as the manifest keeps them: each start of an arm's engine (`engines`), the
interpreters the arms start engines from, the stale engines a resume stopped, and the
run's GPU telemetry."""

from __future__ import annotations

from typing import Any, Literal

from harness.dialects import Dialect
from harness.rundir.record import RunRecord


class EngineInfo(RunRecord):
    """What an engine process is: how it was started, where it listens, what finds it
    again (harness.engines.running.lifecycle makes one per start or attach)."""

    arm: str
    kind: str
    metrics_dialect: Dialect
    version: str | None = None
    command: list[str] = []
    env_overrides: dict[str, str] = {}
    # EngineKind.resolved_settings: the drafter's precision, SGLang's admission delay.
    settings: dict[str, str] = {}
    gpu: str | None = None
    started_wall: float  # time.time() when started (or attached)
    started_iso: str
    ready_after_s: float | None = None
    launched: bool
    log_path: str | None = None
    pid: int | None = None
    # What finds a stale engine of this run later (harness/engines/running/stale.py): its
    # process group (the engine leads its own session), where it listens, and the
    # guard that stops the group if the harness dies.
    pgid: int | None = None
    host: str | None = None
    port: int | None = None
    guard_pid: int | None = None
    base_url: str
    served_model: str


class EngineSession(RunRecord):
    stage: int
    session: int


class EngineStart(EngineInfo):
    """One start of an arm's engine, as the manifest keeps it (`engines[arm][i]`):
    recorded at spawn ("starting"), then completed when it is ready."""

    state: Literal["starting", "ready", "failed to start"]
    started_for: str | None = None  # the cell or stage it was started for
    session: EngineSession | None = None  # the registered session it belongs to
    # harness.measure.priority.PriorityLift.to_dict and
    # harness.measure.placement.CpuPlacement.to_dict: read by the report's text only.
    client_priority: dict[str, Any] | None = None
    client_placement: dict[str, Any] | None = None
    # harness.run.gpu_telemetry.RunTelemetry.for_arm: the GPUs sampled for this arm.
    gpu_telemetry: dict[str, Any] | None = None
    # Merged from a shard's worker by the Ray driver (harness.run.ray_executor).
    shard: str | None = None
    shard_worker: int | None = None
    node_hostname: str | None = None


class EngineEnvironment(RunRecord):
    """One interpreter the arms start engines from (harness.run.environments)."""

    python: str
    python_version: str | None = None
    packages: list[dict[str, str]] | None = None  # {"name", "version"}
    error: str | None = None  # the interpreter could not list its packages
    arms: list[str]
    listed_wall: float
    pin: str | None = None  # the project's pinned requirement for it


class StaleEngineRecord(RunRecord):
    """An engine an earlier attempt left running, stopped on resume."""

    when: float
    arm: str
    pid: int | None = None
    pgid: int | None = None
    port: int | None = None
    port_held: bool
    processes: list[int]
    action: str


class RunGpuTelemetry(RunRecord):
    """Whether NVML was opened, and what it saw (harness.run.gpu_telemetry)."""

    recorded: bool
    reason: str | None = None
    driver_version: str | None = None
    binding: str | None = None
    gpus: list[dict[str, Any]] | None = None  # harness.measure.gpu.Gpu.describe
