"""Weights during a run: engines start offline from the fetched snapshots, pre-flight
refuses a checkpoint that is not fetched, and the manifest records what was loaded.

An arm on a real engine whose target or draft model is a hub checkpoint gets
HF_HUB_OFFLINE=1 and HF_HUB_CACHE (the cache `specbench fetch` filled): vLLM 0.32
then swaps the hub id for the cached snapshot of its --revision at start
(engine/arg_utils.py, get_model_path in transformers_utils/repo_utils.py) and loads
config, tokenizer and weights with local_files_only; SGLang passes
local_files_only=HF_HUB_OFFLINE to every snapshot_download
(srt/model_loader/weight_utils.py). So nothing is downloaded mid-study. The arm's
own `launch.env` still wins (HF_HUB_OFFLINE: "0" lets an engine download).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import SpecbenchError
from harness.prereg.pins import Checkpoint, hub_checkpoints, is_hub_id
from harness.weights.cache import hub_cache_dir
from harness.weights.hashes import weight_hashes
from harness.weights.hub import NotFetched, locate

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study


def arm_checkpoints(study: Study, arm: Arm) -> list[Checkpoint]:
    """The hub checkpoints this arm's engine loads (none for the scripted engine)."""
    if arm.scripted is not None:
        return []
    out = []
    if is_hub_id(study.model.id):
        out.append(Checkpoint(study.model.id, study.model.revision, ("model",), "-"))
    d = arm.drafter
    if d is not None and d.model is not None and is_hub_id(d.model):
        out.append(Checkpoint(d.model, d.revision, (f"drafter of arm {arm.name}",), "-"))
    return out


def hub_environment(study: Study, arm: Arm) -> dict[str, str]:
    """HF_HUB_OFFLINE=1 and HF_HUB_CACHE for an engine that loads hub checkpoints."""
    if arm.launch is None or not arm_checkpoints(study, arm):
        return {}
    return {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache_dir())}


def _starts_offline(study: Study, arm: Arm) -> bool:
    env = {**hub_environment(study, arm), **(arm.launch.env if arm.launch else {})}
    return env.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def weights_problems(study: Study, arm: Arm) -> list[str]:
    """Pre-flight: each hub checkpoint an offline-started arm needs must be in the cache."""
    if not _starts_offline(study, arm):
        return []
    out = []
    for ckpt in arm_checkpoints(study, arm):
        try:
            locate(ckpt)
        except NotFetched as err:
            out.append(
                f"{', '.join(ckpt.roles)} {err.lines[0]}; the engine starts offline"
                " (HF_HUB_OFFLINE=1): run `specbench fetch` on the study first"
            )
    return out


def _local_record(path: str) -> dict[str, Any]:
    folder = Path(os.path.expanduser(path)).resolve()
    files, _ = weight_hashes(folder) if folder.is_dir() else ([], 0)
    return {
        "roles": [],
        "source": "local",
        "path": str(folder),
        "revision": None,
        "commit": None,
        "weights": [f.model_dump() for f in files],
    }


def checkpoint_records(study: Study) -> list[dict[str, Any]]:
    """What the manifest records of every checkpoint the run's engines load: hub ones
    with their registered revision, the commit of the snapshot and the sha256 of each
    weight file; local folders with their path and weight hashes."""
    records: list[dict[str, Any]] = []
    for ckpt in hub_checkpoints(study):
        try:
            snap = locate(ckpt)
        except NotFetched as err:
            # An arm that downloads by itself (HF_HUB_OFFLINE: "0"): nothing to hash yet.
            records.append(
                {
                    "roles": list(ckpt.roles),
                    "source": "hub",
                    "repo": ckpt.repo,
                    "revision": ckpt.revision,
                    "commit": None,
                    "weights": [],
                    "note": err.lines[0],
                }
            )
            continue
        try:
            files, _ = weight_hashes(snap.path)
        except OSError as err:
            raise SpecbenchError(f"{ckpt.label}: cannot read its weight files: {err}") from None
        records.append(
            {
                "roles": list(ckpt.roles),
                "source": "hub",
                "repo": ckpt.repo,
                "revision": ckpt.revision,
                "commit": snap.commit,
                "snapshot": str(snap.path),
                "weights": [f.model_dump() for f in files],
            }
        )
    local: dict[str, dict[str, Any]] = {}

    def add_local(path: str, role: str) -> None:
        if is_hub_id(path) or "${" in path:
            return
        key = str(Path(os.path.expanduser(path)).resolve())
        if key not in local:
            local[key] = _local_record(path)
        local[key]["roles"].append(role)

    real = [a for a in study.arms if a.scripted is None]
    if real:
        add_local(study.model.id, "model")
    for arm in real:
        if arm.drafter is not None and arm.drafter.model is not None:
            add_local(arm.drafter.model, f"drafter of arm {arm.name}")
    return records + list(local.values())
