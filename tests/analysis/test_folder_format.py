"""The run folder's format is versioned and owned by the store: a folder from a newer
format is refused in one line, not misread; one without the field reads as version 1."""

from __future__ import annotations

import json

import pytest

from harness.analysis.load import load_run
from harness.errors import InputError
from harness.run.store import RunStore
from harness.rundir import FORMAT_VERSION, CellFile, rerun_of
from tests.analysis.runfolder import RunBuilder
from tests.run.conftest import specbench


def test_a_newer_format_is_refused_naming_the_field(tmp_path):
    run = RunBuilder(tmp_path)
    run.speed_cells()
    load_run(run.root)  # this format: read
    run.manifest["format_version"] = FORMAT_VERSION + 1
    run.write_manifest()
    with pytest.raises(InputError, match="field format_version: 2 is newer"):
        load_run(run.root)
    proc = specbench("analyse", str(run.root), check=False)
    assert proc.returncode == 2 and "format_version" in proc.stderr
    del run.manifest["format_version"]  # written before the field existed: version 1
    run.write_manifest()
    assert load_run(run.root).run_id == "synthetic-run"


def test_the_store_writes_cell_records_it_can_read_back(tmp_path):
    store = RunStore(tmp_path)
    cell = {"id": "base/chat/speed/c001", "arm": "base", "task": "chat", "kind": "speed"}
    attempt = store.start_attempt(cell["id"], cell)
    store.set_cell_facts(cell["id"], where={"shard": "shard1", "hostname": "h"})
    store.mark_complete(cell["id"], attempt, {"n_ok": 3, "n_errors": 0, "future_field": 1})
    info = CellFile.model_validate(json.loads(
        (store.cell_dir(cell["id"]) / "cell.json").read_text()))
    assert [a.status for a in info.attempts] == ["complete"]
    assert info.where == {"shard": "shard1", "hostname": "h"}
    done = store.completion(cell["id"])
    assert done["outcome"]["n_ok"] == 3 and done["outcome"]["future_field"] == 1
    assert rerun_of("base/chat/speed/c001/rerun1") == "base/chat/speed/c001"
    assert rerun_of("base/chat/speed/c001") is None
