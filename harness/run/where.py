"""Where a cell was measured: the node, its GPUs (name and UUID), the driver and the
engine versions, as cell.json's `where` records it.

A shard worker takes this once when it starts (its GPUs are the ones Ray gave it,
through CUDA_VISIBLE_DEVICES); the local executor takes it once per run. Two shards on
different GPU models are a deviation (`gpu_model_deviation`), named on the verdict page:
their ratios are each paired on one GPU, but the study is no longer one GPU's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

from harness.engines import get_engine_kind
from harness.measure.gpu import NoTelemetry, open_nvml
from harness.prereg.schema import Study
from harness.rundir import CellFile, MeasuredOn, gpu_key
from harness.rundir.engines import EngineEnvironment


def _gpus() -> dict[str, Any]:
    nvml = open_nvml()
    if isinstance(nvml, NoTelemetry):
        return {"gpus": [], "gpu_reason": nvml.reason, "driver_version": None}
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        selection = nvml.select(visible, "CUDA_VISIBLE_DEVICES")
        facts = nvml.facts()
        out: dict[str, Any] = {
            "gpus": [g.describe() for g in selection.gpus],
            "driver_version": facts.get("driver_version"),
        }
        if selection.missing:
            out["gpu_reason"] = "; ".join(selection.missing)
        return out
    finally:
        nvml.close()


def engine_versions(
    study: Study, environments: dict[str, EngineEnvironment]
) -> dict[str, str | None]:
    """arm -> "<package> <version>" of its engine (its kind's `distribution`), from the
    manifest's package lists."""
    out: dict[str, str | None] = {arm.name: None for arm in study.arms}
    for entry in environments.values():
        packages = {p["name"].lower(): p["version"] for p in entry.packages or []}
        for arm in entry.arms:
            if arm in out:
                name = get_engine_kind(study.arm(arm).engine).distribution
                out[arm] = f"{name} {packages[name]}" if name in packages else None
    return out


def placement(
    study: Study,
    environments: dict[str, EngineEnvironment],
    shard: str | None = None,
    node_id: str | None = None,
    ray_gpu_ids: list | None = None,
) -> MeasuredOn:
    """This process's node and GPUs, for every cell it measures."""
    where: dict[str, Any] = {
        "shard": shard,
        "hostname": socket.gethostname(),
        "node_id": node_id,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if ray_gpu_ids is not None:
        where["ray_gpu_ids"] = [str(g) for g in ray_gpu_ids]
    where.update(_gpus())
    where["engine_versions"] = engine_versions(study, environments)
    return MeasuredOn.model_validate(where)


def gpu_models(where: MeasuredOn) -> list[str]:
    return sorted({g.name or "unnamed GPU" for g in where.gpus})


def gpu_model_deviation(placements: dict[str, MeasuredOn]) -> str | None:
    """A sentence when the shards ran on more than one GPU model (None: one model, or no
    GPU seen at all)."""
    by_model: dict[str, list[str]] = {}
    for shard, where in sorted(placements.items()):
        for model in gpu_models(where):
            by_model.setdefault(model, []).append(shard)
    if len(by_model) <= 1:
        return None
    parts = [f"{model} ({', '.join(shards)})" for model, shards in sorted(by_model.items())]
    return (
        "shards ran on different GPU models: " + "; ".join(parts) + ". Every speedup is"
        " still a ratio of two cells measured on one GPU, but figures from different"
        " shards are not one GPU's"
    )


def split_units(cells: list[CellFile], groups: Sequence[tuple[str, ...]]) -> list[str]:
    """A sentence for each engine group x task whose cells were measured on more than one
    GPU (a shard resumed elsewhere, a run resumed on another host): its ratios then divide
    cells from two GPUs."""
    group_of = {arm: g for g in groups for arm in g}
    seen: dict[tuple[tuple[str, ...], str], dict[str, list[str]]] = {}
    for info in cells:
        where, cell = info.where, info.cell
        if where is None or cell.arm not in group_of:
            continue
        unit = (group_of[cell.arm], cell.task)
        seen.setdefault(unit, {}).setdefault(gpu_key(where), []).append(cell.id)
    out = []
    for (group, task), by_gpu in sorted(seen.items()):
        if len(by_gpu) > 1:
            parts = [
                f"{key} ({len(ids)} cells, first {ids[0]})" for key, ids in sorted(by_gpu.items())
            ]
            out.append(
                f"{'+'.join(group)} on {task} was measured on {len(by_gpu)} GPU sets: "
                + "; ".join(parts)
                + ". Its ratios may divide cells from different GPUs"
            )
    return out
