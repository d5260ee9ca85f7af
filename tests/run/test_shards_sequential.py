"""The shards example run sequentially (the first phase: it needs no machine of its own),
kept for tests/run/test_ray_shards.py, which compares the sharded runs with it."""

from __future__ import annotations

import json

from tests.run.conftest import verdict_of
from tests.run.shards_sequential import keep, kept, run_sequential


def test_the_shards_example_run_sequentially_passes_and_is_kept_for_the_sharded_runs(
    request, tmp_path
):
    run = run_sequential(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["sharding"] is None, manifest["sharding"]
    assert verdict_of(run)["verdict"] == "PASS", json.dumps(verdict_of(run), indent=1)[:3000]
    keep(request.config, run)
    assert kept(request.config) is not None
