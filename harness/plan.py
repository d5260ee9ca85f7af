"""The plan: every cell a run executes, in the order it executes them.

Order (engines are started once per arm per stage; harness.rundir.cell.Stage names them):
  stage 1  per arm: identity cells, then speed cells at the stop bar's
           concurrencies (low first) -- so the stop bar is judged before the
           expensive cells;
  stage 2  per arm: the remaining speed cells (skipped if stop fires), then
           accuracy cells;
  stage 3  per arm: open-loop cells at rates relative to the knee;
  stage 4  the round-cost surface (`surface:`): each of its control arms at its levels,
           paired with the baseline's stage 1-2 cells at the same levels, in as many
           sessions as the baseline's cells there (session s with the baseline's s).
  stage 5  the k schedule the surface proposed, per task, at every registered level
           (`surface.verify_schedule`), in sessions the same way.
Stage 2 takes the arms in reverse order, so the arm that ends one stage begins
the next and its engine is not restarted in between. Before stage 1 the runner's
smoke stage (harness.run.smoke) starts every arm once, ending on the first cell's arm.

Repeated sessions (`recording.sessions: N > 1`): each repeating cell (the pass bar's
speed cells, or every speed cell: `recording.sessions_for`) is measured N times, each
time in a session of its own: one fresh engine start of its arm that measures that
arm's cells of the session. Sessions alternate the arms' direction, baseline, drafter,
drafter, baseline, ..., so a slow drift of the host falls on both sides of a pair.
Session 1 keeps the cell's plain id; session s > 1 is `<id>/s<s>` (folder `<dir>__s<s>`).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.calibration import EffectiveHardware, RooflineFigures, figure_text
from harness.plan_arms import schedule_arms, surface_arms
from harness.prereg.schema import SCHEDULE_PREFIX, Arm, Study, TaskSpec
from harness.rundir.cell import Cell, Stage, speed_cell_id


def task_size(task: TaskSpec) -> int:
    """How many items the task runs over (its subset, or the whole vendored set)."""
    from harness.workloads import load_items

    if task.subset is not None:
        return task.subset
    return len(load_items(task.kind, source=task.source))


def _speed_cell(
    study: Study, arm: Arm, task: TaskSpec, c: int, stage: Stage, session: int | None = None
) -> Cell:
    closed = study.loads.closed_loop
    return Cell(
        stage=stage,
        arm=arm.name,
        task=task.name,
        kind="speed",
        concurrency=c,
        requests=closed.requests.for_concurrency(c),
        warmup=closed.warmup_per_user * c,
        session=session if repeats(study, c) else None,  # a level measured once: no session
    )


def baseline_speed_cell_id(study: Study, cell: Cell, session: int | None = None) -> str:
    """The baseline's speed cell a drafter's speed cell is read against: same task and level."""
    baseline = study.arm(cell.arm).baseline
    if baseline is None:
        raise ValueError(f"{cell.id}: its arm has no baseline")
    return speed_cell_id(baseline, cell.task, cell.concurrency, session)


def repeats(study: Study, concurrency: int) -> bool:
    """Whether speed cells at this level are measured in repeated sessions."""
    rec = study.recording
    if rec.sessions <= 1:
        return False
    return rec.sessions_for == "speed_cells" or concurrency in study.bars.pass_.speed.concurrencies


def _stage_speed_cells(
    study: Study, arm: Arm, levels: list[int], stage: Stage, session: int | None
) -> list[Cell]:
    """One arm's speed cells of a stage within one session: the repeating ones as that
    session's, the others only in the first (session None: no sessions at all)."""
    speed_tasks = [t for t in study.tasks if "speed" in t.uses]
    due = [c for c in levels if session in (None, 1) or repeats(study, c)]
    return [_speed_cell(study, arm, t, c, stage, session) for c in due for t in speed_tasks]


def speed_stage(study: Study, concurrency: int) -> Stage:
    """The stage a speed level is measured in: STOP at the stop bar's levels, REST above.
    One engine start serves an arm's whole stage of a session (its levels and tasks)."""
    return Stage.STOP if concurrency in study.bars.stop.concurrencies else Stage.REST


def plan_cells(study: Study, sizes: dict[str, int] | None = None) -> list[Cell]:
    """All cells in run order. `sizes` (task name -> item count) avoids loading data."""
    if sizes is None:
        sizes = {t.name: task_size(t) for t in study.tasks}
    levels = study.loads.closed_loop.concurrency
    identity = study.bars.pass_.identity
    identity_c = identity.concurrency if identity else 1
    n = study.recording.sessions
    stage_levels = {s: [c for c in levels if speed_stage(study, c) == s] for s in Stage}
    cells: list[Cell] = []
    forward = False  # flipped before each session: stage 1's first runs the arms forward
    for stage in (Stage.STOP, Stage.REST):
        repeating = any(repeats(study, c) for c in stage_levels[stage])
        sessions: list[int | None] = list(range(1, n + 1)) if repeating else [None]
        for session in sessions:
            forward = not forward
            for arm in study.arms if forward else list(reversed(study.arms)):
                first = session in (None, 1)
                if stage == Stage.STOP and first:
                    cells.extend(_identity_cells(arm, study, sizes, identity_c))
                cells.extend(_stage_speed_cells(study, arm, stage_levels[stage], stage, session))
                if stage == Stage.REST and first:
                    cells.extend(_accuracy_cells(arm, study, sizes))
    open_loop = study.loads.open_loop
    if open_loop is not None:
        for arm in study.arms:
            for rate in open_loop.rates_relative_to_knee:
                cells.append(
                    Cell(
                        stage=Stage.OPEN_LOOP,
                        arm=arm.name,
                        task=open_loop.task,
                        kind="open",
                        concurrency=None,
                        requests=open_loop.requests,
                        warmup=open_loop.warmup,
                        rate_relative=rate,
                    )
                )
    cells.extend(surface_cells(study))
    cells.extend(schedule_cells(study))
    return cells


def _later_stage_cells(
    study: Study, stage: Stage, arms: list[Arm], tasks: list[TaskSpec], levels: list[int]
) -> list[Cell]:
    """A stage after the registered ones (SURFACE, SCHEDULE): each arm at each task and
    level, in the sessions its baseline's cells there were measured in (harness.plan.repeats), so each
    of its sessions pairs with one of the baseline's: each session a fresh start of every
    arm, the arms' order alternating; a level measured once is measured once here too
    (in the first session's engine)."""
    repeating = any(repeats(study, c) for c in levels)
    sessions: list[int | None] = (
        list(range(1, study.recording.sessions + 1)) if repeating else [None]
    )
    cells = []
    for i, session in enumerate(sessions):
        for arm in arms if i % 2 == 0 else list(reversed(arms)):
            due = [c for c in levels if session in (None, 1) or repeats(study, c)]
            cells += [_speed_cell(study, arm, t, c, stage, session) for t in tasks for c in due]
    return cells


def surface_cells(study: Study) -> list[Cell]:
    """Stage SURFACE: every surface arm at every surface level and task."""
    if (surface := study.surface) is None:
        return []
    tasks = [study.task(name) for name in study.surface_tasks()]
    return _later_stage_cells(study, Stage.SURFACE, surface_arms(study), tasks, surface.concurrency)


def schedule_cells(study: Study) -> list[Cell]:
    """Stage SCHEDULE (surface.verify_schedule): each task's schedule arm at every
    registered closed-loop level of that task; its schedule is set after stage SURFACE."""
    levels, cells = study.loads.closed_loop.concurrency, []
    for arm in schedule_arms(study):
        task = study.task(arm.name.removeprefix(SCHEDULE_PREFIX))
        cells += _later_stage_cells(study, Stage.SCHEDULE, [arm], [task], levels)
    return cells


def _identity_cells(arm: Arm, study: Study, sizes: dict[str, int], concurrency: int) -> list[Cell]:
    if arm.is_control:
        return []  # its text is not the target's: nothing to compare
    return [
        Cell(
            stage=Stage.STOP,
            arm=arm.name,
            task=task.name,
            kind="identity",
            concurrency=concurrency,
            requests=min(task.identity_items, sizes[task.name]),
            warmup=0,
        )
        for task in study.tasks
        if "identity" in task.uses
    ]


def _accuracy_cells(arm: Arm, study: Study, sizes: dict[str, int]) -> list[Cell]:
    if arm.is_control:
        return []
    return [
        Cell(
            stage=Stage.REST,
            arm=arm.name,
            task=task.name,
            kind="accuracy",
            concurrency=study.recording.accuracy_concurrency,
            requests=sizes[task.name],
            warmup=0,
        )
        for task in study.tasks
        if "accuracy" in task.uses
    ]


def block_session(block: list[Cell]) -> tuple[int, int] | None:
    """The (stage, session) an engine block's start serves; None outside sessions."""
    number = next((c.session for c in block if c.session is not None), None)
    return (block[0].stage, number) if number is not None else None


def engine_blocks(cells: list[Cell]) -> list[list[Cell]]:
    """The cells in runs that share one engine start: a new start when the arm changes,
    or when a cell belongs to another session than the one its arm's engine serves (a
    session is a fresh start, even of the arm that ended the session before). Cells
    measured once share the engine of the session next to them (identity cells open
    session 1)."""
    blocks: list[list[Cell]] = []
    session: tuple[int, int] | None = None
    for cell in cells:
        key = (cell.stage, cell.session) if cell.session is not None else None
        if (
            not blocks
            or blocks[-1][0].arm != cell.arm
            or (key is not None and session is not None and key != session)
        ):
            blocks.append([cell])
            session = key
        else:
            blocks[-1].append(cell)
            session = key or session
    return blocks


# --- the GPU-time estimate -----------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    seconds: float
    assumptions: list[str]


def roofline_step_s(
    study: Study,
    batch_tokens: int,
    params_billion: float | None = None,
    figures: RooflineFigures | None = None,
) -> float:
    """Roofline for one forward pass: the larger of reading the weights once and the
    matmul FLOPs for the tokens in it (2 FLOPs per parameter per token). The target's
    by default; `params_billion` for a draft model at the model's bytes per parameter.
    `figures`: bandwidth and FLOP rate measured on the machine (harness.calibration);
    the registered `hardware` ones by default."""
    m = study.model
    hw = figures or study.hardware
    params = m.params_billion if params_billion is None else params_billion
    weight_bytes = params * 1e9 * m.weight_bytes_per_param
    memory_s = weight_bytes / (hw.memory_bandwidth_gb_s * 1e9)
    compute_s = 2 * params * 1e9 * batch_tokens / (hw.dense_tflops * 1e12)
    return max(memory_s, compute_s)


def cell_seconds(study: Study, cell: Cell, figures: RooflineFigures | None = None) -> float:
    arm = study.arm(cell.arm)
    task = study.task(cell.task)
    est = study.plan_estimate
    out_tokens = (
        task.max_tokens if est.mean_output_tokens == "max_tokens" else est.mean_output_tokens
    )
    if cell.kind == "open":
        # Rate is known only after the knee; cost it as the duration or as a c=1 cell.
        open_loop = study.loads.open_loop
        if open_loop is not None and open_loop.duration_s is not None:
            return open_loop.duration_s
        c = 1
    else:
        c = cell.concurrency or 1
    requests = (cell.requests or 0) + cell.warmup
    if arm.drafter is None:
        per_step_tokens, emitted = c, float(c)
    else:
        k = arm.drafter.num_draft_tokens
        accept = arm.drafter.assumed_acceptance_length or est.assumed_acceptance_length
        if arm.drafter.synthetic is not None:  # a control arm's acceptance is set
            accept = arm.drafter.synthetic.tokens_per_round(k)
        per_step_tokens, emitted = c * (k + 1), c * min(accept, k + 1)
    steps = requests * out_tokens / emitted
    return steps * roofline_step_s(study, per_step_tokens, figures=figures)


def estimate(
    study: Study, cells: list[Cell], hardware: EffectiveHardware | None = None, smoke: bool = True
) -> Estimate:
    """`hardware`: the roofline's inputs when the machine was calibrated (measured
    figures, the registered ones beside); the registered figures by default. `smoke`:
    count the smoke stage's engine starts (False: a part of the plan, costed apart)."""
    # One engine runs at a time; it is restarted when the next cell's arm differs, and
    # for every repeated session.
    figures = hardware.used if hardware is not None else None
    engine_starts = len(engine_blocks(cells))
    # The smoke starts every arm once; the last one's engine serves the first cell.
    smoke_starts = len(study.arms) - 1 if smoke and study.recording.smoke and cells else 0
    engine_starts += smoke_starts
    seconds = sum(cell_seconds(study, c, figures) for c in cells)
    seconds += engine_starts * study.plan_estimate.engine_start_s
    # Whether the first SGLang start compiles DeepGEMM's FP8 kernels (10-20 min) or finds
    # them compiled by `specbench engines warm sglang` (imported here: nothing else in
    # the plan needs the engine adapters).
    from harness.engines.install.deepgemm import plan_note

    deepgemm = plan_note(study) if cells else None
    seconds += deepgemm[1] if deepgemm else 0.0
    hw, m = study.hardware, study.model
    step_ms = roofline_step_s(study, 1, figures=figures) * 1e3
    if hardware is not None and hardware.measured is not None:
        used = hardware.used
        rates = (
            f"{hw.gpu} measured {figure_text(used.memory_bandwidth_gb_s)} GB/s,"
            f" {figure_text(used.dense_tflops)} TFLOP/s (registered"
            f" {hw.memory_bandwidth_gb_s:g}, {hw.dense_tflops:g})"
        )
    else:
        rates = f"{hw.gpu} {hw.memory_bandwidth_gb_s:g} GB/s, {hw.dense_tflops:g} TFLOP/s"
    return Estimate(
        seconds=seconds,
        assumptions=[
            f"decode step = max(weights / bandwidth, 2 x params x tokens / FLOP rate);"
            f" weights {m.params_billion:g}e9 x {m.weight_bytes_per_param:g} B,"
            f" {rates} -> {step_ms:.1f} ms per step at batch 1",
            f"every request decodes {study.plan_estimate.mean_output_tokens} tokens; prefill,"
            " drafter cost and scheduling overheads are ignored",
            f"drafters accept {study.plan_estimate.assumed_acceptance_length:g} tokens per"
            " verification unless the arm states its own assumed_acceptance_length",
            f"{engine_starts} engine starts x {study.plan_estimate.engine_start_s:g} s"
            + (
                f" ({smoke_starts} of them for the smoke stage; its prompts are not costed)"
                if smoke_starts
                else ""
            ),
            "open-loop cells are costed at their duration (or as one-user cells)",
            *([deepgemm[0]] if deepgemm else []),
            *(
                [
                    f"{sessions} sessions of each repeating cell ({study.recording.sessions_for}):"
                    f" {repeated} cells, each session a fresh engine start"
                ]
                if (sessions := study.recording.sessions) > 1
                and (repeated := sum(1 for c in cells if c.session is not None))
                else []
            ),
        ],
    )


def expected_seconds(
    study: Study,
    cells: list[Cell],
    most: float,
    p_cell: dict[str, float],
    p_block: dict[str, float],
    figures: RooflineFigures | None = None,
) -> float:
    """The estimate `most` (every cell measured) less each cell and engine start (its
    block's first cell) at its chance not to be measured (1 where not given)."""
    most -= sum((1.0 - p_cell.get(c.id, 1.0)) * cell_seconds(study, c, figures) for c in cells)
    return (
        most
        - sum(1.0 - p_block.get(b[0].id, 1.0) for b in engine_blocks(cells))
        * study.plan_estimate.engine_start_s
    )
