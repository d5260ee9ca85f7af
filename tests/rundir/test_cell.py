"""The typed cell (harness.rundir.cell): its id and folder name follow from its fields by
the one grammar, a check-bar rerun included (measured in session N + s, named after the
session s it measures again); cell.json holds it and reads it back the same, a stored id
that is not the one the fields give is refused naming the file, and a cell.json written
before the model (format 5: the planner's dataclass, its rerun without `rerun`) reads.
cell.json's `where` is typed the same way: what placement writes reads, a key it does not
write is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.analysis.load import load_run
from harness.errors import InputError
from harness.run.store import RunStore
from harness.rundir import CellFile, MeasuredOn, gpu_key
from harness.rundir.cell import Cell, Stage
from tests.analysis.runfolder import RunBuilder


def speed(session: int | None = None, c: int = 1) -> Cell:
    return Cell(
        stage=Stage.STOP,
        arm="base",
        task="chat",
        kind="speed",
        concurrency=c,
        requests=20,
        warmup=2,
        session=session,
    )


def test_the_id_and_folder_follow_from_the_fields_for_every_kind():
    assert speed().id == "base/chat/speed/c001"
    assert speed(session=1).id == "base/chat/speed/c001"  # session 1 keeps the plain id
    assert speed(session=2, c=16).id == "base/chat/speed/c016/s2"
    assert speed(session=2, c=16).dirname == "base__chat__speed__c016__s2"
    fixed = {"stage": 1, "arm": "d", "task": "gsm8k", "requests": 8, "warmup": 0}
    identity = Cell.model_validate(fixed | {"kind": "identity", "concurrency": 1})
    assert identity.id == "d/gsm8k/identity"
    accuracy = Cell.model_validate(fixed | {"kind": "accuracy", "concurrency": 16})
    assert accuracy.id == "d/gsm8k/accuracy"
    open_cell = Cell.model_validate(
        fixed | {"kind": "open", "concurrency": None, "rate_relative": 1.5}
    )
    assert open_cell.id == "d/gsm8k/open/x1.5" and open_cell.load_label == "open x1.5 knee"


def test_a_rerun_is_named_after_the_session_it_measures_again_not_the_one_it_runs_in():
    rerun = speed(session=2).rerun_cell(registered_sessions=3)
    assert rerun.session == 5  # a fresh session after the registered three
    assert rerun.id == "base/chat/speed/c001/s2/rerun1"
    assert rerun.dirname == "base__chat__speed__c001__s2__rerun1"
    assert rerun.planned() == speed(session=2)
    assert speed(session=1).rerun_cell(3).id == "base/chat/speed/c001/rerun1"
    once = speed().rerun_cell(3)
    assert once.session is None and once.id == "base/chat/speed/c001/rerun1"
    with pytest.raises(ValueError, match="rerun_of_session"):
        Cell.model_validate(speed(session=5).model_dump() | {"rerun": 1, "id": rerun.id})
    with pytest.raises(ValueError, match="speed cell of base/chat without a concurrency"):
        Cell.model_validate(speed().model_dump(exclude={"id"}) | {"concurrency": None})


def test_the_id_is_computed_once_and_a_copy_with_other_fields_computes_its_own():
    cell = speed(session=2, c=4)
    assert cell.id is cell.id  # cached (Cell is frozen)
    rerun = cell.rerun_cell(3, 2)
    assert (cell.id, rerun.id) == ("base/chat/speed/c004/s2", "base/chat/speed/c004/s2/rerun2")
    assert rerun.planned().id == cell.id and rerun.planned() == cell
    other = cell.model_copy(update={"concurrency": 8})
    assert other.id == "base/chat/speed/c008/s2" and cell.model_copy().id == cell.id
    assert json.loads(rerun.model_dump_json())["id"] == rerun.id


def test_a_reruns_cell_json_reads_back_to_the_same_cell(tmp_path):
    store = RunStore(tmp_path)
    rerun = speed(session=2).rerun_cell(3)
    store.start_attempt(rerun)
    path = store.cell_dir(rerun.id) / "cell.json"
    assert path.parent.name == rerun.dirname
    stored = json.loads(path.read_text())["cell"]
    assert stored["id"] == rerun.id and stored["session"] == 5
    assert type(stored["stage"]) is int and stored["stage"] == 1  # the number, as ever
    assert CellFile.model_validate(json.loads(path.read_text())).cell == rerun
    # Through the process boundary (the Ray shard worker's batches) the same way.
    assert Cell.model_validate(json.loads(json.dumps(rerun.model_dump(mode="json")))) == rerun


def test_cell_json_as_format_5_wrote_it_reads():
    """The planner's dataclass, asdict: the id first, no `rerun`; a rerun of session 2 in
    a study of 3 sessions stored its session as 3 + 2 and its id as session 2's."""
    planned = {
        "id": "base/chat/speed/c001/s2",
        "stage": 1,
        "arm": "base",
        "task": "chat",
        "kind": "speed",
        "concurrency": 1,
        "requests": 20,
        "warmup": 2,
        "rate_relative": None,
        "session": 2,
    }
    assert Cell.model_validate(planned) == speed(session=2)
    assert Cell.model_validate(planned).stage is Stage.STOP
    with pytest.raises(ValidationError, match="stage"):
        Cell.model_validate(planned | {"stage": 6})  # no such stage
    rerun = planned | {"id": "base/chat/speed/c001/s2/rerun1", "session": 5}
    assert Cell.model_validate(rerun) == speed(session=2).rerun_cell(3)
    first = planned | {"id": "base/chat/speed/c001/rerun1", "session": 4}
    assert Cell.model_validate(first) == speed(session=1).rerun_cell(3)
    once = planned | {"id": "base/chat/speed/c001/rerun1", "session": None}
    assert Cell.model_validate(once) == speed().rerun_cell(3)


def cell_json(run: RunBuilder, cell_id: str) -> Path:
    (path,) = (run.root / "cells").glob(f"{cell_id.replace('/', '__')}/cell.json")
    return path


def test_a_stored_id_its_fields_do_not_give_is_refused_naming_the_file(tmp_path):
    run = RunBuilder(tmp_path)
    run.speed_cells()
    load_run(run.root)
    path = cell_json(run, "vllm-base/chat/speed/c002")
    data = json.loads(path.read_text())
    data["cell"]["concurrency"] = 4  # the fields say c004, the stored id c002
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        load_run(run.root)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    assert "'vllm-base/chat/speed/c002' is not the cell's id 'vllm-base/chat/speed/c004'" in message


def test_a_cell_json_holding_another_cell_than_its_folders_is_refused(tmp_path):
    run = RunBuilder(tmp_path)
    run.speed_cells()
    path = cell_json(run, "vllm-base/chat/speed/c002")
    data = json.loads(path.read_text())
    data["cell"] |= {"id": "vllm-base/chat/speed/c004", "concurrency": 4}
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=f"{path}: field cell: holds cell 'vllm-base/chat/"):
        load_run(run.root)


def test_a_format_5_rerun_folder_loads_with_its_planned_cells_coordinates(tmp_path):
    run = RunBuilder(tmp_path)
    run.speed_cells()
    run.speed("vllm-base", "chat", 1, 44.0, cell_id="vllm-base/chat/speed/c001/rerun1")
    cell = load_run(run.root).cells["vllm-base/chat/speed/c001/rerun1"]
    assert cell.rerun_of == "vllm-base/chat/speed/c001" and cell.status == "complete"
    assert (cell.arm, cell.kind, cell.concurrency, cell.stage) == ("vllm-base", "speed", 1, 1)


# --- where a cell was measured (harness.run.where.placement) ------------------------------

PLACEMENT = {  # what placement writes on a shard's worker, as a cell.json of format 5 holds it
    "shard": "shard2",
    "hostname": "gpu-node-3",
    "node_id": "abc123",
    "cuda_visible_devices": "2,3",
    "ray_gpu_ids": ["2", "3"],
    "gpus": [
        {"index": 0, "uuid": "GPU-aa", "name": "NVIDIA H100 80GB HBM3"},
        {"index": 1, "uuid": None, "name": "NVIDIA H100 80GB HBM3"},
    ],
    "driver_version": "570.86",
    "engine_versions": {"vllm-base": "vllm 0.32.0", "sglang-base": None},
}


def test_where_as_placement_writes_it_reads_and_names_its_gpu_set():
    where = MeasuredOn.model_validate(PLACEMENT)
    assert gpu_key(where) == "gpu-node-3:GPU-aa,index 1"  # NVML's UUIDs first
    no_nvml = MeasuredOn.model_validate(PLACEMENT | {"gpus": [], "gpu_reason": "no NVML"})
    assert gpu_key(no_nvml) == "gpu-node-3:2,3"  # then the GPUs Ray gave
    here = MeasuredOn(hostname="h", cuda_visible_devices="1")
    assert gpu_key(here) == "h:1" and gpu_key(MeasuredOn(hostname="h")) == "h:all"


def test_a_where_key_placement_does_not_write_is_refused_naming_the_file(tmp_path):
    run = RunBuilder(tmp_path)
    run.speed_cells()
    path = cell_json(run, "vllm-base/chat/speed/c002")
    data = json.loads(path.read_text())
    data["where"] = PLACEMENT | {"host": "gpu-node-3"}
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=f"{path}: unknown key 'host' in where"):
        load_run(run.root)
    data["where"] = PLACEMENT
    path.write_text(json.dumps(data))
    assert load_run(run.root).cells["vllm-base/chat/speed/c002"].where == MeasuredOn.model_validate(
        PLACEMENT
    )
