"""How a plan is cut into shards: every ratio's two cells in one shard, never more shards
than GPU slots, and the estimate stage by stage."""

from __future__ import annotations

import json

import pytest

from harness.errors import InputError
from harness.plan import estimate, plan_cells
from harness.prereg import load_study_file
from harness.run.schedule import rerun_cells
from harness.run.where import gpu_model_deviation, split_units
from harness.rundir import CellFile, GpuSeen, MeasuredOn
from harness.shards import engine_groups, plan_shards, shard_of, sharded_estimate, slots_for
from tests.run.conftest import ROOT, specbench

PREREG = load_study_file(ROOT / "prereg.yaml").study


def paired(cells, shards) -> None:
    """Every drafter cell's baseline cell (same task, kind and load) is in its shard."""
    by_id = {c.id: c for c in cells}
    for cell in cells:
        arm = PREREG.arm(cell.arm) if cell.arm in {a.name for a in PREREG.arms} else None
        if arm is None or arm.baseline is None:
            continue
        twin = by_id.get(cell.id.replace(f"{cell.arm}/", f"{arm.baseline}/", 1))
        assert twin is not None, cell.id
        assert shard_of(shards, cell) == shard_of(shards, twin), (cell.id, twin.id)


def test_engine_groups_are_each_baseline_with_its_drafters():
    assert engine_groups(PREREG) == [
        ("vllm-base", "vllm-eagle3", "vllm-ngram"),
        ("sglang-base", "sglang-dflash"),
    ]


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 8, 16])
def test_shards_keep_every_pair_together_and_never_outnumber_the_gpus(gpus):
    cells = plan_cells(PREREG)
    shards = plan_shards(PREREG, cells, slots_for(PREREG, gpus))
    assert 1 <= len(shards) <= gpus
    # Every cell in exactly one shard.
    assert sorted(c.id for c in cells) == sorted(c.id for c in cells for s in shards if s.holds(c))
    paired(cells, shards)
    # A check-bar rerun of a baseline cell goes where that cell was measured.
    base = next(c for c in cells if c.arm == "vllm-base" and c.kind == "speed")
    (rerun,) = rerun_cells(cells, [base.id])
    assert shard_of(shards, rerun) == shard_of(shards, base)


def test_eight_gpus_give_each_group_one_shard_per_task():
    shards = plan_shards(PREREG, plan_cells(PREREG), 8)
    units = sorted((u.arms[0], u.tasks) for s in shards for u in s.units)
    assert units == sorted(
        (base, (task,))
        for base in ("vllm-base", "sglang-base")
        for task in ("chat", "gsm8k", "humaneval", "mmlu")
    )


def test_more_groups_than_gpus_are_packed_whole():
    shards = plan_shards(PREREG, plan_cells(PREREG), 1)
    assert len(shards) == 1 and len(shards[0].units) == 2
    assert {u.tasks for u in shards[0].units} == {("chat", "gsm8k", "humaneval", "mmlu")}


def test_one_gpu_estimates_what_the_plan_estimates_and_more_gpus_less_wall_clock():
    cells = plan_cells(PREREG)
    one = sharded_estimate(PREREG, cells, 1)
    assert one.wall_s == pytest.approx(estimate(PREREG, cells).seconds, rel=1e-9)
    walls = [sharded_estimate(PREREG, cells, n).wall_s for n in (1, 2, 4, 8)]
    assert walls == sorted(walls, reverse=True) and walls[-1] < walls[0] / 2


def test_gpus_below_one_engine_are_refused():
    study = PREREG.model_copy(update={"hardware": PREREG.hardware.model_copy(update={"count": 2})})
    with pytest.raises(InputError, match="hardware.count 2"):
        slots_for(study, 1)
    assert slots_for(study, 5) == 2


def test_plan_prints_the_shards_for_eight_gpus_and_the_estimates_side_by_side():
    out = specbench("plan", "prereg.yaml", "--gpus", "8").stdout
    assert "8 shards on 8 GPUs" in out
    for n in range(1, 9):
        assert f"shard{n}" in out
    assert "vllm-base+vllm-eagle3+vllm-ngram on chat" in out
    table = out[out.index("GPUs  shards") :].splitlines()
    assert [line.split()[0] for line in table[2:6]] == ["1", "2", "4", "8"]
    data = json.loads(specbench("plan", "prereg.yaml", "--gpus", "8", "--format", "json").stdout)[
        "sharding"
    ]
    assert [e["gpus"] for e in data["by_gpus"]] == [1, 2, 4, 8]
    assert len(data["shards"]) == 8
    bad = specbench("plan", "prereg.yaml", "--gpus", "0", check=False)
    assert bad.returncode == 2 and "--gpus 0" in bad.stderr


def test_shards_on_two_gpu_models_are_a_deviation():
    h100 = MeasuredOn(gpus=[GpuSeen(index=0, uuid="GPU-1", name="NVIDIA H100 80GB HBM3")])
    h200 = MeasuredOn(gpus=[GpuSeen(index=0, uuid="GPU-2", name="NVIDIA H200")])
    assert gpu_model_deviation({"shard1": h100, "shard2": h100}) is None
    assert gpu_model_deviation({"shard1": MeasuredOn(), "shard2": MeasuredOn()}) is None
    sentence = gpu_model_deviation({"shard1": h100, "shard2": h200})
    assert sentence is not None
    assert "NVIDIA H100 80GB HBM3 (shard1)" in sentence and "NVIDIA H200 (shard2)" in sentence


def test_a_unit_measured_on_two_gpus_is_named():
    groups = [("base", "draft")]

    def info(arm: str, task: str, uuid: str) -> CellFile:
        cell = {"arm": arm, "task": task, "stage": 1, "kind": "speed", "concurrency": 1}
        where = {"hostname": "h", "gpus": [{"index": 0, "uuid": uuid}]}
        return CellFile.model_validate(
            {"cell": cell | {"requests": 1, "warmup": 0}, "where": where}
        )

    same = [
        info("base", "chat", "GPU-a"),
        info("draft", "chat", "GPU-a"),
        info("base", "gsm8k", "GPU-b"),
        info("draft", "gsm8k", "GPU-b"),
    ]
    assert split_units(same, groups) == []  # two tasks on two GPUs: each unit on one
    split = same[:1] + [info("draft", "chat", "GPU-b")]
    (sentence,) = split_units(split, groups)
    assert sentence.startswith("base+draft on chat was measured on 2 GPU sets")


def test_the_gpu_model_deviation_is_recorded_once_for_the_verdict_page(tmp_path):
    from harness.report.views.verdict import deviation_lines
    from harness.run.ray_executor import record_gpu_model_deviation
    from harness.run.store import RunStore
    from harness.rundir.manifest import Manifest
    from harness.rundir.shards import ShardRecord

    store = RunStore(tmp_path)
    store.create_manifest(
        Manifest(
            run_id="run",
            shards={
                "shard1": ShardRecord(
                    where=MeasuredOn(gpus=[GpuSeen(index=0, uuid="GPU-1", name="NVIDIA H100")])
                ),
                "shard2": ShardRecord(
                    where=MeasuredOn(gpus=[GpuSeen(index=0, uuid="GPU-2", name="NVIDIA A100")])
                ),
            },
        )
    )
    assert record_gpu_model_deviation(store)
    record_gpu_model_deviation(store)  # a resume records nothing new
    (line,) = deviation_lines(store.manifest())
    assert "shards ran on different GPU models: NVIDIA A100 (shard2); NVIDIA H100 (shard1)" in line
