"""The run folder's format is versioned and owned in one place (harness.rundir): the
manifest, the verdict, a cell's outcome and its scores are read back through the models
that wrote them. A folder from a newer format is refused in one line, not misread; a
key a record does not name, or one the current format writes that a file lacks, is
refused with the file and the key; a folder the landed format 1 wrote (the demo's, kept
as a fixture) is still read, and analysis gives it the verdict it was given."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from harness.analysis import analyse, evaluate
from harness.analysis.load import load_run
from harness.errors import InputError
from harness.run.store import RunStore
from harness.rundir import Cell, CellFile, MeasuredOn, Outcome, rerun_of
from harness.rundir.cell import Stage
from harness.rundir.engines import EngineStart
from harness.rundir.manifest import FORMAT_VERSION, Manifest, read_manifest
from harness.rundir.verdict import Verdict, read_verdict
from tests.analysis.runfolder import RunBuilder
from tests.run.conftest import specbench

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "run_folders"
# `specbench run examples/cpu.yaml` on the vLLM CPU engine at 753cf31 (format 1), without
# its engine logs and derived tables: the demo's real manifest, verdict, cells and scores.
DEMO_FORMAT_1 = FIXTURES / "demo-format1.tar.gz"


def demo_folder(tmp_path: Path) -> Path:
    with tarfile.open(DEMO_FORMAT_1) as tar:
        tar.extractall(tmp_path, filter="data")
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run


def rename_key(path: Path, old: str, new: str, where: list | None = None) -> None:
    """Rename one key of a JSON file, at the top or under `where` (a path of keys)."""
    data = json.loads(path.read_text())
    node = data
    for step in where or []:
        node = node[step]
    node[new] = node.pop(old)
    path.write_text(json.dumps(data))


def test_a_newer_format_is_refused_naming_the_field(tmp_path):
    run = RunBuilder(tmp_path)
    run.speed_cells()
    load_run(run.root)  # this format: read
    run.manifest.format_version = FORMAT_VERSION + 1
    run.write_manifest()
    with pytest.raises(InputError, match=f"field format_version: {FORMAT_VERSION + 1} is newer"):
        load_run(run.root)
    proc = specbench("analyse", str(run.root), check=False)
    assert proc.returncode == 2 and "format_version" in proc.stderr


def test_the_demo_folder_of_format_1_reads_back_through_the_typed_models(tmp_path):
    run = demo_folder(tmp_path)
    manifest = read_manifest(run / "manifest.json")
    assert manifest.format_version == 1 and manifest.status == "complete"
    assert sorted(manifest.engines) == ["cpu-base", "cpu-draft", "cpu-ngram"]
    start = manifest.engines["cpu-draft"][0]
    assert start.state == "ready" and start.kind == "vllm-cpu" and start.launched
    assert manifest.smoke is not None and manifest.smoke.status == "passed"
    assert manifest.regime["cpu-base"].memory_bound is True
    assert manifest.host is not None and manifest.host.cpus == 2

    stored = read_verdict(run / "verdict.json", manifest.format_version)
    assert stored.verdict == "PASS" and stored.bar("pass.speed").status == "pass"
    data = load_run(run)
    scored = data.cell("cpu-base/gsm8k/accuracy")
    assert scored.complete is not None and isinstance(scored.complete.outcome, Outcome)
    assert scored.scores and all(isinstance(ok, bool) for ok in scored.scores.values())

    # Analysed again by this specbench: the same bars, but for the knee, read since
    # issue 46 on the point estimates: the draft-model arm's speedup is still 1.06 at 32
    # users, the top level (its lower bound had crossed 1.0 at ~10 users, where the old
    # rule put the knee), so its knee is a bound, "> 32", and the verdict FAIL.
    again = evaluate(analyse(run))
    before = {b.name: b.status for b in stored.bars}
    assert before["pass.knee"] == "pass"
    assert {b.name: b.status for b in again.bars} == before | {"pass.knee": "not_located"}
    knee = again.bar("pass.knee").evidence["tasks"]["chat"]["arms"]["cpu-draft"]
    assert (knee["knee_status"], knee["knee"], knee["interval"]) == (
        "beyond",
        "> 32",
        "17.0 to > 32",
    )
    assert (stored.verdict, again.verdict) == ("PASS", "FAIL")


@pytest.mark.parametrize(
    "file, old, new, where, said",
    [
        ("manifest.json", "skipped", "skiped", None, "unknown key 'skiped'"),
        (
            "manifest.json",
            "served_model",
            "model",
            ["engines", "cpu-draft", 0],
            "key 'served_model' is missing in engines.cpu-draft.0; unknown key 'model' in"
            " engines.cpu-draft.0",
        ),
        (
            "cells/cpu-base__chat__speed__c001/complete.json",
            "n_ok",
            "n_good",
            ["outcome"],
            "unknown key 'n_good' in outcome",
        ),
    ],
)
def test_a_renamed_key_is_refused_with_the_file_and_the_key(tmp_path, file, old, new, where, said):
    run = demo_folder(tmp_path)
    rename_key(run / file, old, new, where)
    with pytest.raises(InputError) as err:
        load_run(run)
    assert str(run / file) in str(err.value) and said in str(err.value), err.value
    proc = specbench("analyse", str(run), check=False)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr


def test_renamed_keys_in_the_verdict_and_the_scores_are_refused(tmp_path):
    run = demo_folder(tmp_path)
    rename_key(run / "verdict.json", "reasons", "why")
    with pytest.raises(
        InputError, match=r"verdict.json: key 'reasons' is missing; unknown key 'why'"
    ):
        read_verdict(run / "verdict.json", 1)
    scores = run / "cells" / "cpu-base__gsm8k__accuracy" / "scores.jsonl"
    lines = scores.read_text().splitlines()
    lines[0] = lines[0].replace('"correct"', '"right"')
    scores.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        InputError,
        match=r"scores.jsonl: line 1: key 'correct' is missing;"
        r" unknown key 'right'",
    ):
        load_run(run)


def test_the_current_format_refuses_a_key_it_writes_but_the_file_lacks(tmp_path):
    run = RunBuilder(tmp_path)
    run.speed_cells()
    path = run.root / "manifest.json"
    data = json.loads(path.read_text())
    assert data["format_version"] == FORMAT_VERSION and "stale_engines" in data
    del data["engines"]["vllm-base"][0]["state"]
    path.write_text(json.dumps(data))
    with pytest.raises(
        InputError,
        match=r"manifest.json: key 'state' is missing in"
        r" engines.vllm-base.0",
    ):
        load_run(run.root)
    # Format 1 wrote only the keys it had something for: the same file as format 1 is
    # read, its absent keys at their defaults, except those every start had.
    data = json.loads(path.read_text())
    data["format_version"] = 1
    del data["stale_engines"]
    data["engines"]["vllm-base"][0]["state"] = "ready"
    path.write_text(json.dumps(data))
    assert read_manifest(path).stale_engines == []


def test_a_key_a_later_format_added_is_required_only_from_that_format(tmp_path):
    """Format 3 added the schedule verification's k_schedules, format 4 the SPEED-Bench
    placeholder rows dropped: a folder written before each reads with none; a file of
    that format without it is refused."""
    run = RunBuilder(tmp_path)
    run.speed_cells()
    path = run.root / "manifest.json"
    data = json.loads(path.read_text())
    assert FORMAT_VERSION >= 4 and data["speed_bench_placeholders"] == {}
    del data["speed_bench_placeholders"]
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"key 'speed_bench_placeholders' is missing"):
        read_manifest(path)
    data["format_version"] = 3
    path.write_text(json.dumps(data))
    assert read_manifest(path).speed_bench_placeholders == {}
    assert data["k_schedules"] == {}
    del data["k_schedules"]
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"manifest.json: key 'k_schedules' is missing"):
        read_manifest(path)
    data["format_version"] = 2
    path.write_text(json.dumps(data))
    assert read_manifest(path).k_schedules == {}
    # Every other key format 2 wrote is still required of it.
    del data["stale_engines"]
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"key 'stale_engines' is missing"):
        read_manifest(path)


def test_format_4_keys_are_required_of_format_4_and_absent_from_format_3(tmp_path):
    """Format 4 added what --remeasure-invalid records (the manifest's remeasured, the
    runner's invoked_as) and the verdict's unfinished and remeasured: a format 3 folder,
    written before them, reads with none; a format 4 file without one is refused."""
    from harness.analysis.bars import write_verdict

    run = RunBuilder(tmp_path)
    run.speed_cells()
    write_verdict(run.root)
    path, verdict_path = run.root / "manifest.json", run.root / "verdict.json"
    data, verdict = json.loads(path.read_text()), json.loads(verdict_path.read_text())
    assert FORMAT_VERSION >= 4 and data["remeasured"] == [] and verdict["remeasured"] == []
    del data["remeasured"], verdict["unfinished"]
    path.write_text(json.dumps(data))
    verdict_path.write_text(json.dumps(verdict))
    with pytest.raises(InputError, match=r"manifest.json: key 'remeasured' is missing"):
        read_manifest(path)
    with pytest.raises(InputError, match=r"verdict.json: key 'unfinished' is missing"):
        read_verdict(verdict_path, 4)
    data["format_version"] = 3
    path.write_text(json.dumps(data))
    assert read_manifest(path).remeasured == []
    assert read_verdict(verdict_path, 3).unfinished is None
    data["runner"] = {"pid": 1, "started_wall": 0.0, "cmdline": ["specbench"]}  # as format 3
    path.write_text(json.dumps(data))
    runner = read_manifest(path).runner
    assert runner is not None and runner.invoked_as is None
    data["format_version"], data["remeasured"] = 4, []
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"key 'invoked_as' is missing in runner"):
        read_manifest(path)


def test_format_5_keys_are_required_of_format_5_and_absent_from_format_4(tmp_path):
    """Format 5 added a group-sequential design's looks (the manifest's) and what the
    verdict says of them (its design): a format 4 folder reads with none; a format 5 file
    without one is refused."""
    from harness.analysis.bars import write_verdict

    run = RunBuilder(tmp_path)
    run.speed_cells()
    write_verdict(run.root)
    path, verdict_path = run.root / "manifest.json", run.root / "verdict.json"
    data, verdict = json.loads(path.read_text()), json.loads(verdict_path.read_text())
    assert FORMAT_VERSION >= 5 and data["looks"] == [] and verdict["design"] is None
    del data["looks"], verdict["design"]
    path.write_text(json.dumps(data))
    verdict_path.write_text(json.dumps(verdict))
    with pytest.raises(InputError, match=r"manifest.json: key 'looks' is missing"):
        read_manifest(path)
    with pytest.raises(InputError, match=r"verdict.json: key 'design' is missing"):
        read_verdict(verdict_path, 5)
    data["format_version"] = 4
    path.write_text(json.dumps(data))
    assert read_manifest(path).looks == []
    assert read_verdict(verdict_path, 4).design is None


def test_a_run_written_now_is_read_back_whole(tmp_path):
    """What a scripted study writes reads back through the models, every key present."""
    run = RunBuilder(tmp_path)
    run.speed_cells()
    verdict_path = run.root / "verdict.json"
    from harness.analysis.bars import write_verdict

    written = write_verdict(run.root)
    assert read_verdict(verdict_path) == written
    # Written whole: every key the models name is in the files, nulls and empties too.
    data = json.loads((run.root / "manifest.json").read_text())
    assert set(data) == set(Manifest.model_fields)
    assert set(data["engines"]["vllm-base"][0]) == set(EngineStart.model_fields)
    assert set(json.loads(verdict_path.read_text())) == set(Verdict.model_fields)


def test_the_store_writes_cell_records_it_can_read_back(tmp_path):
    store = RunStore(tmp_path)
    cell = Cell(
        stage=Stage.STOP, arm="base", task="chat", kind="speed", concurrency=1, requests=3, warmup=0
    )
    attempt = store.start_attempt(cell)
    store.set_cell_facts(cell.id, where={"shard": "shard1", "hostname": "h"})
    store.mark_complete(cell.id, attempt, Outcome(n_ok=3, n_errors=0))
    info = CellFile.model_validate(json.loads((store.cell_dir(cell.id) / "cell.json").read_text()))
    assert info.cell == cell and [a.status for a in info.attempts] == ["complete"]
    assert info.where == MeasuredOn(shard="shard1", hostname="h")
    done = store.completion(cell.id)
    assert done is not None and done.outcome == Outcome(n_ok=3, n_errors=0)
    assert rerun_of("base/chat/speed/c001/rerun1") == "base/chat/speed/c001"
    assert rerun_of("base/chat/speed/c001") is None
