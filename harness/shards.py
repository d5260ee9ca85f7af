"""Shards: the plan cut into pieces that run on different GPUs, every ratio kept paired.

A speedup divides a drafter arm's cell by its baseline's cell of the same task and load;
identity and accuracy compare a drafter with its baseline on the same task. So the unit
that must stay on one GPU is an *engine group* (a baseline and the drafter arms compared
with it) on one task: a shard is one or more such units, and every cell of a unit runs in
the one shard that holds it (its open-loop cells and check-bar reruns too).

How a plan is cut for S GPU slots (a slot is `hardware.count` GPUs, one engine's):
  - every engine group with all its tasks is a unit;
  - while there are fewer units than slots, the unit with the most estimated work that
    has more than one task is split in two, its tasks dealt out longest first;
  - while there are more units than slots, units are packed into S shards, longest
    first onto the least loaded shard.
So there are never more shards than slots, and every shard's worker can hold its GPU for
the whole run (a stage barrier never waits on a shard that has no GPU yet).

The wall-clock estimate follows the run's barriers: stage 1 everywhere, then stage 2,
then the open loop; each stage lasts as long as its slowest shard.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import InputError
from harness.plan import cell_seconds, engine_blocks
from harness.plan_arms import schedule_arms, surface_arms
from harness.prereg.schema import Study
from harness.rundir.cell import Cell, Stage


@dataclass(frozen=True)
class Unit:
    """One engine group on some of its tasks: what never leaves one GPU."""

    arms: tuple[str, ...]  # the baseline first, then its drafter arms in study order
    tasks: tuple[str, ...]

    def holds(self, cell: Cell) -> bool:
        return cell.arm in self.arms and cell.task in self.tasks

    @property
    def label(self) -> str:
        return f"{'+'.join(self.arms)} on {', '.join(self.tasks)}"


@dataclass(frozen=True)
class Shard:
    name: str  # shard1, shard2, ...
    units: tuple[Unit, ...]

    def holds(self, cell: Cell) -> bool:
        return any(u.holds(cell) for u in self.units)

    @property
    def arms(self) -> list[str]:
        return [a for u in self.units for a in u.arms if a]

    @property
    def label(self) -> str:
        return "; ".join(u.label for u in self.units)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "units": [{"arms": list(u.arms), "tasks": list(u.tasks)} for u in self.units],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Shard:
        return cls(
            data["name"], tuple(Unit(tuple(u["arms"]), tuple(u["tasks"])) for u in data["units"])
        )


def engine_groups(study: Study) -> list[tuple[str, ...]]:
    """Each baseline arm with the drafter arms compared with it, in study order (the
    round-cost surface's arms with the baseline they are paired with)."""
    groups: dict[str, list[str]] = {}
    for arm in [*study.arms, *surface_arms(study), *schedule_arms(study)]:
        root = arm.baseline or arm.name
        groups.setdefault(root, [])
        if arm.baseline is None:
            groups[root].insert(0, arm.name)
        else:
            groups[root].append(arm.name)
    return [tuple(arms) for arms in groups.values()]


def slots_for(study: Study, gpus: int) -> int:
    """How many engines `gpus` GPUs hold at once: each takes `hardware.count`."""
    per_engine = study.hardware.count
    if gpus < per_engine:
        raise InputError(
            f"--gpus {gpus}: the study registers hardware.count {per_engine} GPUs"
            " per engine, so at least that many are needed"
        )
    return gpus // per_engine


def _seconds(study: Study, cells: list[Cell]) -> float:
    return sum(cell_seconds(study, c) for c in cells)


def _deal(tasks: list[tuple[str, float]], bins: int) -> list[list[str]]:
    """Tasks (name, seconds) dealt into `bins` lists, longest first onto the lightest."""
    loads = [0.0] * bins
    out: list[list[str]] = [[] for _ in range(bins)]
    for name, seconds in sorted(tasks, key=lambda t: -t[1]):
        i = loads.index(min(loads))
        out[i].append(name)
        loads[i] += seconds
    return out


def plan_shards(study: Study, cells: list[Cell], slots: int) -> list[Shard]:
    """The plan cut for `slots` engines at once (see the module docstring)."""
    if slots < 1:
        raise InputError(f"need at least one GPU slot, got {slots}")
    task_order = [t.name for t in study.tasks]

    def unit_seconds(unit: Unit) -> float:
        return _seconds(study, [c for c in cells if unit.holds(c)])

    units: list[Unit] = []
    for arms in engine_groups(study):
        tasks = [t for t in task_order if any(c.arm in arms and c.task == t for c in cells)]
        if tasks:
            units.append(Unit(arms, tuple(tasks)))
    while len(units) < slots:
        splittable = [u for u in units if len(u.tasks) > 1]
        if not splittable:
            break
        biggest = max(splittable, key=unit_seconds)
        per_task = [(t, unit_seconds(Unit(biggest.arms, (t,)))) for t in biggest.tasks]
        halves = _deal(per_task, 2)
        i = units.index(biggest)
        units[i : i + 1] = [
            Unit(biggest.arms, tuple(t for t in task_order if t in half)) for half in halves
        ]
    if len(units) > slots:
        loads = [0.0] * slots
        packed: list[list[Unit]] = [[] for _ in range(slots)]
        for unit in sorted(units, key=lambda u: -unit_seconds(u)):
            i = loads.index(min(loads))
            packed[i].append(unit)
            loads[i] += unit_seconds(unit)
        groups = [tuple(p) for p in packed if p]
    else:
        groups = [(u,) for u in units]
    return [Shard(f"shard{i}", g) for i, g in enumerate(groups, 1)]


def shard_of(shards: list[Shard], cell: Cell) -> Shard:
    for shard in shards:
        if shard.holds(cell):
            return shard
    raise InputError(f"cell {cell.id} is in no shard of this plan")


def shard_cells(shards: list[Shard], cells: list[Cell]) -> dict[str, list[Cell]]:
    """Each shard's cells, in plan order."""
    out: dict[str, list[Cell]] = {s.name: [] for s in shards}
    for cell in cells:
        out[shard_of(shards, cell).name].append(cell)
    return out


# --- the wall-clock estimate -----------------------------------------------------------


def stage_seconds(study: Study, cells: list[Cell], arms: int) -> dict[Stage, float]:
    """One shard's estimated seconds per stage: its cells, and its engine starts counted
    in the stage where each start happens (the smoke's in Stage.STOP)."""
    out = dict.fromkeys(Stage, 0.0)
    for cell in cells:
        out[cell.stage] += cell_seconds(study, cell)
    start_s = study.plan_estimate.engine_start_s
    for block in engine_blocks(cells):
        out[block[0].stage] += start_s
    if study.recording.smoke and cells:
        out[Stage.STOP] += (arms - 1) * start_s
    return out


@dataclass(frozen=True)
class ShardedEstimate:
    gpus: int
    shards: list[Shard]
    per_shard: dict[str, dict[Stage, float]]  # shard -> stage -> seconds
    wall_s: float  # stage by stage, each as long as its slowest shard
    busy_gpu_s: float  # the GPU time shards spend working (not waiting at a barrier)


def sharded_estimate(study: Study, cells: list[Cell], gpus: int) -> ShardedEstimate:
    shards = plan_shards(study, cells, slots_for(study, gpus))
    by_shard = shard_cells(shards, cells)
    per_shard = {s.name: stage_seconds(study, by_shard[s.name], len(s.arms)) for s in shards}
    # DeepGEMM's compile, where the plan counts one: in stage 1 of every shard that starts
    # an SGLang engine (shards start together, so none finds another's kernels compiled).
    from harness.engines.install.deepgemm import plan_note, sglang_arms

    note = plan_note(study)
    compile_s = note[1] if note else 0.0
    compiling = {a.name for a in sglang_arms(study)} if compile_s else set()
    for s in shards:
        if compiling & {c.arm for c in by_shard[s.name]}:
            per_shard[s.name][Stage.STOP] += compile_s
    wall = sum(max(p[stage] for p in per_shard.values()) for stage in Stage)
    busy = sum(sum(p.values()) for p in per_shard.values()) * study.hardware.count
    return ShardedEstimate(gpus, shards, per_shard, wall, busy)
