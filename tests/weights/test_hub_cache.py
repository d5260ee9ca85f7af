"""One hub cache for every command: `validate`, `doctor` and `fetch` look for a
checkpoint in the cache huggingface_hub's own environment variables name, through one
lookup (harness.weights.cache), whichever of HF_HUB_CACHE, the legacy
HUGGINGFACE_HUB_CACHE or HF_HOME names it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from harness.cli import main
from harness.doctor.host_checks import weight_checks
from harness.prereg import load_study, load_study_file
from harness.prereg.drafter_base import check_drafter_bases, config_path
from harness.prereg.pins import hub_checkpoints
from harness.weights import hub
from harness.weights.cache import find_checkpoint, hub_cache_dir, repo_folder
from tests.weights.hubcache import HubCache, build_hub_cache, study, write_study

ROOT = Path(__file__).resolve().parents[2]
HUB_VARIABLES = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


@pytest.fixture(scope="module")
def cached(tmp_path_factory) -> HubCache:
    return build_hub_cache(tmp_path_factory.mktemp("hub"))


def point_at(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for name in HUB_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def pinned_study(tmp_path: Path, cached: HubCache) -> Path:
    return write_study(
        tmp_path / "study.yaml",
        study(
            "specbench/tiny", cached.target_commit, ("specbench/tiny-draft", cached.draft_commit)
        ),
    )


def what_each_command_sees(path: Path) -> dict[str, object]:
    """Where validate, doctor and fetch each find the target and the drafter."""
    loaded = load_study_file(path)
    arm = next(a for a in loaded.study.arms if a.drafter is not None)
    console = Console(file=io.StringIO())
    fetched = [hub.fetch(c, console) for c in hub_checkpoints(loaded.study, loaded)]
    doctor = {c.name: (c.status, c.detail) for c in weight_checks(load_study(path))}
    return {
        "validate: drafter config": config_path(arm),
        "validate: drafter base read": check_drafter_bases(loaded)[0].config,
        "doctor: model": doctor["weights: model"][0],
        "doctor: drafter": doctor["weights: drafter of draft"][0],
        "fetch: snapshots": {s.repo: s.path for s in fetched},
    }


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"])
def test_validate_doctor_and_fetch_look_in_one_cache(
    variable, cached, tmp_path, monkeypatch
) -> None:
    # HF_HOME names the folder that holds hub/; the other two name the cache itself.
    point_at(
        monkeypatch,
        HF_HUB_OFFLINE="1",
        **{variable: str(cached.root.parent if variable == "HF_HOME" else cached.root)},
    )
    cache = hub_cache_dir()
    assert cache == cached.root.resolve()
    draft = find_checkpoint("specbench/tiny-draft", cached.draft_commit)
    assert draft.present and draft.snapshot == (
        repo_folder(cache, "specbench/tiny-draft") / "snapshots" / cached.draft_commit
    )
    seen = what_each_command_sees(pinned_study(tmp_path, cached))
    assert draft.snapshot is not None
    assert seen["validate: drafter config"] == draft.snapshot / "config.json"
    assert seen["validate: drafter base read"] == draft.snapshot / "config.json"
    assert seen["doctor: model"] == "ok" and seen["doctor: drafter"] == "ok"
    assert seen["fetch: snapshots"] == {
        "specbench/tiny": repo_folder(cache, "specbench/tiny") / "snapshots" / cached.target_commit,
        "specbench/tiny-draft": draft.snapshot,
    }


def test_hf_hub_cache_wins_over_the_legacy_name_for_every_command(
    cached, tmp_path, monkeypatch
) -> None:
    # huggingface_hub's order: HF_HUB_CACHE first. An empty one there hides the filled
    # cache the legacy variable names, from all three commands alike.
    empty = tmp_path / "empty-hub"
    point_at(
        monkeypatch,
        HF_HUB_OFFLINE="1",
        HF_HUB_CACHE=str(empty),
        HUGGINGFACE_HUB_CACHE=str(cached.root),
    )
    assert hub_cache_dir() == empty.resolve()
    path = pinned_study(tmp_path, cached)
    loaded = load_study_file(path)
    arm = next(a for a in loaded.study.arms if a.drafter is not None)
    assert config_path(arm) is None
    doctor = {c.name: c for c in weight_checks(load_study(path))}
    assert doctor["weights: model"].status == "FAIL"
    assert f"not in the hub cache ({empty.resolve()})" in doctor["weights: model"].detail
    for ckpt in hub_checkpoints(loaded.study, loaded):
        with pytest.raises(hub.NotFetched, match="not in the hub cache"):
            hub.fetch(ckpt, Console(file=io.StringIO()))


def test_the_commands_agree_under_the_legacy_variable(
    cached, tmp_path, capsys, monkeypatch
) -> None:
    """The commands themselves, with HUGGINGFACE_HUB_CACHE alone: fetch (a fresh
    interpreter, as huggingface_hub reads its environment at import), validate."""
    path = pinned_study(tmp_path, cached)
    env = {k: v for k, v in os.environ.items() if k not in HUB_VARIABLES}
    env.update(
        HF_HUB_OFFLINE="1",
        HUGGINGFACE_HUB_CACHE=str(cached.root),
        SPECBENCH_CACHE=str(tmp_path / "specbench-cache"),
        PYTHONPATH=str(ROOT),
    )
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "fetch", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"hub cache {cached.root.resolve()} (offline" in done.stdout
    assert f"ok: commit {cached.draft_commit}" in done.stdout
    point_at(monkeypatch, HUGGINGFACE_HUB_CACHE=str(cached.root))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    config = (
        repo_folder(cached.root.resolve(), "specbench/tiny-draft")
        / "snapshots"
        / cached.draft_commit
        / "config.json"
    )
    assert f"draft: {config} names no base model" in out
