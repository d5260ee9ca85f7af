"""The one atomic writer: a file is replaced whole or not at all."""

from __future__ import annotations

import json

import pytest

from harness.atomic import atomic_path, write_json, write_jsonl


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "verdict.json"
    write_json(path, {"verdict": "PASS"})
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text('{"verdict": "FA')  # half written when the writer dies
        raise RuntimeError("crash mid-write")
    assert json.loads(path.read_text()) == {"verdict": "PASS"}
    assert [p.name for p in tmp_path.iterdir()] == ["verdict.json"]


def test_writes_land_whole_in_new_folders(tmp_path):
    path = tmp_path / "a" / "b" / "items.jsonl"
    write_jsonl(path, [{"id": 1, "text": "é"}, {"id": 2}])
    assert path.read_text(encoding="utf-8") == '{"id": 1, "text": "é"}\n{"id": 2}\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ["items.jsonl"]
