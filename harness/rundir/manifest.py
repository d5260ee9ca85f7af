"""manifest.json, typed: what a run recorded about itself (its study's seal, the host,
every engine start, the stop decision, skipped and rerun cells, deviations, the smoke,
sessions, shards, checkpoints, engine environments, GPU telemetry, the host's regime).

The writer (harness.run.store.RunStore) builds and edits a `Manifest` and writes it
whole, every field; every reader (analysis, report, the CLI, the Ray driver's merge)
reads it back through `read_manifest`. A key this model does not name is refused, and
so, in a folder of the current format, is a key it names that the file lacks: both with
the file and the key. A folder of format 1 (the first versioned one, whose writer left
out keys it had nothing to say about) is still read, its absent keys at their defaults.

Deep parts whose shape belongs to someone else stay plain data and say whose: a bar's
`evidence` (harness.analysis), where a shard ran (harness.run.where), the client's
placement and priority (harness.measure).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from harness.calibration import CalibrationRecord
from harness.errors import InputError
from harness.rundir.engines import (
    EngineEnvironment,
    EngineStart,
    RunGpuTelemetry,
    StaleEngineRecord,
)
from harness.rundir.looks import LookRecord
from harness.rundir.record import EVERY_KEY, RunRecord, since
from harness.rundir.regime import BaselineRegime
from harness.rundir.remeasure import RemeasureRecord
from harness.rundir.schedule import (
    FailedCell,
    KScheduleRecord,
    RerunRecord,
    SessionRecord,
    SkippedCell,
    SmokeSummary,
    StopDecisionRecord,
)
from harness.rundir.shards import Sharding, ShardRecord

MANIFEST = "manifest.json"
# The run folder's format; a folder written by a newer format is refused, not misread.
# 1: the first versioned one (folders without the field are read as 1); its writer left
#    out keys it had nothing to say about.
# 2: manifest.json written whole through `Manifest` (every key, null or empty where
#    there is nothing to say).
# 3: the schedule verification's k schedules (`Manifest.k_schedules`) and its rows in
#    verdict.json (`SurfaceSummary.verification`).
# 4: the SPEED-Bench placeholder rows a task dropped (`Manifest.speed_bench_placeholders`);
#    cells measured again by `--remeasure-invalid` (`Manifest.remeasured`, cell.json's
#    `fresh_budget_after`), the wrapper a run was started by (`RunnerRecord.invoked_as`),
#    and verdict.json's `unfinished` and `remeasured`.
# 5: a group-sequential design's looks (`Manifest.looks`) and verdict.json's `design`.
# 6: cell.json's `cell` written from the typed `Cell` (harness.rundir.cell): a check-bar
#    rerun names itself (`rerun`, `rerun_of_session`) beside its fields, and the stored
#    id must be the one the fields give (format 5's rerun, without those keys, is read
#    from its id).
FORMAT_VERSION = 6
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)

# --- the host and the process that runs the study ---------------------------------------


class HostFacts(RunRecord):
    """harness.run.store.host_facts."""

    hostname: str
    cpus: int | None = None
    cpu: str | None = None
    gpus: list[str] | None = None  # nvidia-smi's lines; None where it did not answer


class RunnerRecord(RunRecord):
    """The `specbench run` process (harness.run.leftovers: a resume refuses a live one)."""

    pid: int
    started_wall: float
    cmdline: list[str]
    # The command that stands for `specbench run FILE` where a script wraps it
    # (scripts/demo.sh sets SPECBENCH_INVOKED_AS): the verdict's command to finish a run.
    invoked_as: str | None = Field(None, json_schema_extra=since(4))


# --- what the study registered, as run --------------------------------------------------


class ControlArmRecord(RunRecord):
    """An arm measured at a set acceptance, never judged (Study.control_arms)."""

    arm: str
    baseline: str | None
    engine: str
    method: str
    num_draft_tokens: int
    synthetic: dict[str, Any]
    tokens_per_round: float
    line: str


class WeightFile(RunRecord):
    file: str
    sha256: str
    size: int


class CheckpointRecord(RunRecord):
    """One checkpoint the engines load (harness.weights.record.checkpoint_records)."""

    roles: list[str]
    source: Literal["hub", "local"]
    repo: str | None = None
    path: str | None = None
    revision: str | None = None
    commit: str | None = None
    snapshot: str | None = None
    weights: list[WeightFile]
    note: str | None = None  # why it was not hashed (not fetched yet)


class Deviation(RunRecord):
    """A way the run departed from the registered study: said on the verdict page."""

    when: float | str
    what: str
    arm: str | None = None
    reason: str | None = None
    # resumed under a different seal
    old_seal: str | None = None
    new_seal: str | None = None
    changes: list[str] | None = None
    # resumed with different checkpoints
    old_checkpoints: list[CheckpointRecord] | None = None
    new_checkpoints: list[CheckpointRecord] | None = None
    # --allow-unpinned (harness.prereg.pins.PinReport.deviation)
    unpinned: list[dict[str, Any]] | None = None
    open_markers: list[str] | None = None
    # merged from a shard's worker
    shard: str | None = None
    shard_worker: int | None = None


# --- the manifest -----------------------------------------------------------------------

RunStatus = Literal["running", "complete", "interrupted", "smoke_failed"]


class Manifest(RunRecord):
    """manifest.json. A shard worker's own folder has one too (`shard` set): the part
    of it the driver merges."""

    format_version: int = FORMAT_VERSION
    run_id: str
    shard: str | None = None
    seal: str | None = None
    study_file: str | None = None
    specbench_commit: str | None = None
    host: HostFacts | None = None
    runner: RunnerRecord | None = None
    started_wall: float | None = None
    ended_wall: float | None = None
    status: RunStatus | None = None
    engines: dict[str, list[EngineStart]] = {}
    control_arms: list[ControlArmRecord] = []
    checkpoints: list[CheckpointRecord] | None = None  # None: not recorded yet
    engine_environments: dict[str, EngineEnvironment] = {}
    calibration: CalibrationRecord | None = None
    gpu_telemetry: RunGpuTelemetry | None = None
    smoke: SmokeSummary | None = None
    regime: dict[str, BaselineRegime] = {}
    sessions: list[SessionRecord] = []
    stop: StopDecisionRecord | None = None
    skipped: list[SkippedCell] = []
    reruns: list[RerunRecord] = []
    failed_cells: list[FailedCell] = []
    deviations: list[Deviation] = []
    stale_engines: list[StaleEngineRecord] = []
    sharding: Sharding | None = None
    shards: dict[str, ShardRecord] = {}
    # The schedule verification (surface.verify_schedule): per arm, the k schedule
    # proposed once stage 4 was measured, kept so a resumed run runs the same one.
    k_schedules: dict[str, KScheduleRecord] = Field(
        default_factory=dict, json_schema_extra=since(3)
    )
    # By task and category: SPEED-Bench placeholder rows left out (placeholders: drop), rows.
    speed_bench_placeholders: dict[str, dict[str, tuple[int, int]]] = Field(
        default_factory=dict, json_schema_extra=since(4)
    )
    # `--resume --remeasure-invalid`: each cell given a fresh cell_retries budget, when, why.
    remeasured: list[RemeasureRecord] = Field(default_factory=list, json_schema_extra=since(4))
    # design: group_sequential: each look, the bars it decided, the cells it left out.
    looks: list[LookRecord] = Field(default_factory=list, json_schema_extra=since(5))

    def to_json(self) -> dict[str, Any]:
        """Every field, nulls and empties too: what the current format writes."""
        return self.model_dump(mode="json")

    def skipped_reasons(self) -> dict[str, str]:
        return {s.cell: s.reason for s in self.skipped}


def check_format(version: Any, where: Path) -> int:
    if (
        not isinstance(version, int)
        or isinstance(version, bool)
        or version not in READABLE_VERSIONS
    ):
        newer = isinstance(version, int) and version > FORMAT_VERSION
        raise InputError(
            f"{where}: field format_version: {version!r} is "
            + (
                f"newer than this specbench reads ({FORMAT_VERSION}); analyse it with the"
                " specbench that wrote it"
                if newer
                else f"not a format this specbench reads ({', '.join(map(str, READABLE_VERSIONS))})"
            )
        )
    return version


def manifest_from(data: Any, where: Path) -> Manifest:
    """A manifest's JSON, checked: the file and the key on anything refused."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
    version = check_format(data.get("format_version", 1), where)
    try:
        # Format 1 left keys out; it is read with them at their defaults, as format 2.
        manifest = Manifest.model_validate(data, context={EVERY_KEY: version})
    except ValidationError as err:
        raise InputError(f"{where}: {validation_problem(err)}") from None
    return manifest


def read_manifest(path: Path) -> Manifest:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (not a run folder?)") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: line {err.lineno}: not valid JSON ({err.msg})") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read it: {err}") from None
    return manifest_from(data, path)


def validation_problem(err: ValidationError, limit: int = 3) -> str:
    """What pydantic refused, in one line: `unknown key 'x' in a.b`, `key 'y' is missing
    in a.b`, `field a.b.c: message` (a renamed key is both: the old one missing, the new
    one unknown)."""
    parts = []
    problems = err.errors()
    for problem in problems[:limit]:
        loc = ".".join(str(p) for p in problem["loc"])
        parent, _, key = loc.rpartition(".")
        where = f" in {parent}" if parent else ""
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            parts.append(f"unknown key {key!r}{where}")
        elif problem["type"] == "missing":
            parts.append(f"key {key!r} is missing{where}")
        elif message.startswith("key "):  # RunRecord's every-key check, raised on the parent
            parts.append(f"{message}" + (f" in {loc}" if loc else ""))
        else:
            parts.append(f"field {loc}: {message}" if loc else message)
    more = len(problems) - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "CheckpointRecord",
    "RemeasureRecord",
    "ControlArmRecord",
    "Deviation",
    "HostFacts",
    "Manifest",
    "RunRecord",
    "RunnerRecord",
    "check_format",
    "since",
    "manifest_from",
    "read_manifest",
    "validation_problem",
]
