"""Engines start offline from the fetched snapshots: the hub environment they get,
pre-flight refusing a checkpoint that is not fetched, and what the manifest records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness import paths
from harness.engines.probe.preflight import preflight
from harness.engines.running.lifecycle import start_engine
from harness.prereg.schema import Study
from harness.weights.record import checkpoint_records, hub_environment, weights_problems
from tests.weights.hubcache import ABSENT_SHA, HubCache, build_hub_cache, study

FAKE = Path(__file__).resolve().parents[1] / "engines" / "fake_engine.py"


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> HubCache:
    return build_hub_cache(tmp_path_factory.mktemp("hub"))


@pytest.fixture(autouse=True)
def hub_env(hub, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(hub.root))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "specbench-cache")


def test_hub_checkpoints_start_offline_from_the_cache(hub) -> None:
    s = Study.model_validate(study("specbench/tiny", hub.target_commit))
    assert hub_environment(s, s.arms[0]) == {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub.root)}
    # A local model (the CPU demo) and the scripted engine get nothing added.
    local = Study.model_validate(study(str(hub.model_dir), None, engine="vllm-cpu"))
    assert hub_environment(local, local.arms[0]) == {}
    scripted = Study.model_validate(
        {
            **study("specbench/tiny", None),
            "arms": [{"name": "s", "engine": "scripted", "launch": {}, "scripted": {}}],
        }
    )
    assert hub_environment(scripted, scripted.arms[0]) == {}
    # A local target with a hub drafter: the drafter arm starts offline, the base does not.
    mixed = Study.model_validate(
        study(str(hub.model_dir), None, drafter=("specbench/tiny-draft", "main"))
    )
    assert hub_environment(mixed, mixed.arm("base")) == {}
    assert hub_environment(mixed, mixed.arm("draft"))["HF_HUB_OFFLINE"] == "1"


def test_preflight_refuses_a_checkpoint_that_is_not_fetched(hub) -> None:
    s = Study.model_validate(
        study("specbench/tiny", hub.target_commit, drafter=("specbench/absent", ABSENT_SHA))
    )
    assert weights_problems(s, s.arm("base")) == []
    [problem] = weights_problems(s, s.arm("draft"))
    assert problem.startswith(
        f"drafter of arm draft specbench/absent@{ABSENT_SHA}: not in the hub cache {hub.root}"
    )
    assert "run `specbench fetch`" in problem
    assert f"arm 'draft': {problem}" in preflight(s)
    # An arm that lets its engine download (its own env wins) is not held to the cache.
    online = Study.model_validate(
        study(
            "specbench/tiny",
            hub.target_commit,
            drafter=("specbench/absent", ABSENT_SHA),
            launch={"python": "/x/python", "env": {"HF_HUB_OFFLINE": "0"}},
        )
    )
    assert weights_problems(online, online.arm("draft")) == []


def test_the_engine_gets_the_offline_hub_environment(hub, tmp_path) -> None:
    launch = {
        "command": [sys.executable, str(FAKE)],
        "env": {"FAKE_ENGINE_MODE": "ok"},
        "startup_timeout_s": 20,
        "stop_grace_s": 5,
    }
    s = Study.model_validate(study("specbench/tiny", hub.target_commit, launch=launch))
    with start_engine(s.arms[0], s, tmp_path / "logs") as engine:
        assert engine.info.env_overrides == {
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_CACHE": str(hub.root),
            "FAKE_ENGINE_MODE": "ok",
        }
        assert "--revision" in engine.info.command
        assert engine.info.command[engine.info.command.index("--revision") + 1] == hub.target_commit
    log = (tmp_path / "logs" / "engine-base.log").read_text()
    seen = json.loads(log.split("fake engine hub environment: ", 1)[1].splitlines()[0])
    assert seen == {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub.root)}


def test_the_manifest_records_each_checkpoints_commit_and_weight_sha256(hub) -> None:
    s = Study.model_validate(
        study("specbench/tiny", "main", drafter=("specbench/tiny-draft", hub.draft_commit))
    )
    records = checkpoint_records(s)
    assert [(r["repo"], r["revision"], r["commit"]) for r in records] == [
        ("specbench/tiny", "main", hub.target_commit),
        ("specbench/tiny-draft", hub.draft_commit, hub.draft_commit),
    ]
    assert records[0]["roles"] == ["model"] and records[1]["roles"] == ["drafter of arm draft"]
    assert records[0]["weights"] == [
        {
            "file": "model.safetensors",
            "sha256": hub.weights_sha256,
            "size": (hub.model_dir / "model.safetensors").stat().st_size,
        }
    ]
    assert records[1]["weights"][0]["sha256"] == hub.draft_sha256
    # A local model (the demo's) is recorded by path, with its weights hashed too.
    local = Study.model_validate(
        study(str(hub.model_dir), None, engine="vllm-cpu", drafter=(str(hub.model_dir), None))
    )
    [record] = checkpoint_records(local)
    assert record["source"] == "local" and record["path"] == str(hub.model_dir.resolve())
    assert record["roles"] == ["model", "drafter of arm draft"]
    assert record["weights"][0]["sha256"] == hub.weights_sha256
