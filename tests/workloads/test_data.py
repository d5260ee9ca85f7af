"""Vendored data: counts, ids, provenance, sha256 refusal, subsets, hub sources, prompts."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import paths
from harness.workloads import (
    DataIntegrityError,
    Item,
    data_digests,
    load_items,
    provenance,
    subset_items,
)
from harness.workloads.kinds import VENDORED_KINDS  # SPEED-Bench: test_speed_bench.py
from harness.workloads.templates import TaskDefinitionError, load_task

W = paths.WORKLOADS_DIR
EXPECTED_COUNTS = {"chat": 80, "gsm8k": 1319, "humaneval": 164, "mmlu": 1000}
ID_PATTERNS = {
    "chat": r"chat:\d+",
    "gsm8k": r"gsm8k:\d+",
    "humaneval": r"humaneval:HumanEval/\d+",
    "mmlu": r"mmlu:[a-z_]+/\d+",
}


@dataclass
class Hub:
    dataset: str
    revision: str
    split: str | None = None


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", VENDORED_KINDS)
def test_counts_ids_and_messages(kind):
    items = load_items(kind)
    assert len(items) == EXPECTED_COUNTS[kind]
    assert len({it.id for it in items}) == len(items)
    for it in items:
        assert isinstance(it, Item) and it.kind == kind
        assert re.fullmatch(ID_PATTERNS[kind], it.id), it.id
        assert it.messages and it.messages[-1]["role"] == "user"
        assert all(set(m) == {"role", "content"} and m["content"] for m in it.messages)


@pytest.mark.parametrize("kind", VENDORED_KINDS)
def test_license_and_provenance_are_vendored(kind):
    prov = provenance(kind)
    assert (W / kind / "LICENSE").read_bytes()
    assert _sha(W / kind / "LICENSE") == prov["license_file_sha256"]
    assert prov["source"]["repo"] and prov["source"]["commit"]
    for name, meta in prov["vendored"]["files"].items():
        assert _sha(W / kind / name) == meta["sha256"]
        assert (W / kind / name).stat().st_size == meta["bytes"]


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("chat", "question.jsonl"),
        ("gsm8k", "test.jsonl"),
        ("humaneval", "HumanEval.jsonl.gz"),
        ("mmlu", "source/mmlu.zip"),
    ],
)
def test_vendored_files_are_the_upstream_bytes(kind, name):
    # The digest recorded when the source was fetched (the copied "files" section),
    # not one computed from our copy.
    upstream = provenance(kind)["files"][Path(name).name]["sha256"]
    assert provenance(kind)["vendored"]["files"][name]["sha256"] == upstream


def test_chat_is_the_first_turn_of_each_mt_bench_question():
    raw = [json.loads(line) for line in (W / "chat" / "question.jsonl").open(encoding="utf-8")]
    items = {it.id: it for it in load_items("chat")}
    assert len(raw) == 80
    for row in raw:
        it = items[f"chat:{row['question_id']}"]
        assert it.messages == [{"role": "user", "content": row["turns"][0]}]
        assert it.reference == {"question_id": row["question_id"], "category": row["category"]}


def test_gsm8k_ids_are_line_numbers_and_gold_is_after_hashes():
    lines = (W / "gsm8k" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    items = load_items("gsm8k")
    with_commas = negatives = 0
    for i, (line, it) in enumerate(zip(lines, items, strict=True)):
        row = json.loads(line)
        assert it.id == f"gsm8k:{i}"
        tail = row["answer"].rsplit("####", 1)[1].strip()
        with_commas += "," in tail
        negatives += tail.startswith("-")
        assert it.reference["answer"] == tail.replace(",", "")
        assert row["question"] in it.messages[0]["content"]
    assert (with_commas, negatives) == (14, 2)  # as the dataset README says


def test_humaneval_items_carry_the_test_program_pieces():
    with gzip.open(W / "humaneval" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        raw = [json.loads(line) for line in f]
    items = load_items("humaneval")
    assert [it.id for it in items] == [f"humaneval:HumanEval/{n}" for n in range(164)]
    for row, it in zip(raw, items, strict=True):
        assert it.reference == {
            k: row[k] for k in ("task_id", "prompt", "canonical_solution", "test", "entry_point")
        }
        assert row["prompt"] in it.messages[0]["content"]


def test_mmlu_ids_name_the_row_of_the_subject_csv():
    zpath = W / "mmlu" / "source" / "mmlu.zip"
    with zipfile.ZipFile(zpath) as zf:
        tables = {}
        for name in zf.namelist():
            m = re.fullmatch(r"data/test/(.+)_test\.csv", name)
            if m:
                text = zf.read(name).decode("utf-8")
                tables[m.group(1)] = list(csv.reader(io.StringIO(text, newline="")))
    items = load_items("mmlu")
    assert sum(len(t) for t in tables.values()) == 14042 and len(tables) == 57
    for it in items:
        subject, row = it.id[len("mmlu:") :].rsplit("/", 1)
        q, a, b, c, d, ans = tables[subject][int(row)]
        assert it.reference == {"answer": ans, "subject": subject}
        content = it.messages[0]["content"]
        assert q in content
        assert f"A) {a}\nB) {b}\nC) {c}\nD) {d}" in content


@pytest.mark.parametrize("kind", VENDORED_KINDS)
def test_data_digests_cover_data_and_template(kind):
    digests = data_digests(kind)
    assert f"{kind}/task.yaml" in digests
    for name in provenance(kind)["vendored"]["files"]:
        assert f"{kind}/{name}" in digests
    for rel, digest in digests.items():
        assert _sha(W / rel) == digest


@pytest.fixture
def workloads_copy(tmp_path, monkeypatch):
    dst = tmp_path / "workloads"
    shutil.copytree(W, dst)
    monkeypatch.setattr(paths, "WORKLOADS_DIR", dst)
    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    return dst


def test_a_changed_file_is_refused(workloads_copy):
    f = workloads_copy / "gsm8k" / "test.jsonl"
    data = bytearray(f.read_bytes())
    data[100] ^= 0x01  # one bit
    f.write_bytes(bytes(data))
    with pytest.raises(DataIntegrityError) as err:
        load_items("gsm8k")
    msg = str(err.value)
    assert "gsm8k/test.jsonl" in msg and "does not match" in msg and "refusing" in msg
    with pytest.raises(DataIntegrityError):
        data_digests("gsm8k")
    assert len(load_items("mmlu")) == 1000  # other tasks still load


def test_a_missing_file_is_refused(workloads_copy):
    (workloads_copy / "humaneval" / "HumanEval.jsonl.gz").unlink()
    with pytest.raises(DataIntegrityError, match="missing vendored data file"):
        load_items("humaneval")


def test_a_changed_zip_is_refused_too(workloads_copy):
    with open(workloads_copy / "mmlu" / "source" / "mmlu.zip", "ab") as f:
        f.write(b"\0")
    with pytest.raises(DataIntegrityError, match="mmlu.zip"):
        load_items("mmlu")


def test_the_data_is_read_through_datasets(monkeypatch):
    import datasets

    calls = []
    real = datasets.load_dataset

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    load_items("gsm8k")
    assert calls and calls[0][0] == ("json",) and calls[0][1]["split"] == "train"
    assert calls[0][1]["data_files"].endswith("gsm8k/test.jsonl")


def test_subset_is_seeded_stable_and_nested():
    items = load_items("gsm8k")
    a = load_items("gsm8k", subset=50, subset_seed=7)
    assert a == load_items("gsm8k", subset=50, subset_seed=7)
    assert len(a) == 50
    order = {it.id: i for i, it in enumerate(items)}
    assert [order[it.id] for it in a] == sorted(order[it.id] for it in a)  # original order
    small = {it.id for it in subset_items(items, 10, seed=7)}
    assert small <= {it.id for it in a}
    assert {it.id for it in load_items("gsm8k", subset=50, subset_seed=8)} != {it.id for it in a}
    assert load_items("chat", subset=1000) == load_items("chat")
    with pytest.raises(ValueError):
        load_items("gsm8k", subset=0)


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown task kind"):
        load_items("nope")


def test_hub_source_uses_datasets_with_the_same_ids(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    repo = tmp_path / "hub" / "gsm8k"
    repo.mkdir(parents=True)
    rows = [
        {"question": f"What is {i}+{i}?", "answer": f"{i}+{i}\n#### {2 * i:,}"}
        for i in range(600, 605)
    ]
    (repo / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_items("gsm8k", source=Hub(str(repo), "main", "test"))
    assert [it.id for it in items] == [f"gsm8k:{i}" for i in range(5)]
    assert items[0].reference == {"answer": "1200"}
    assert items[0].messages == load_task("gsm8k").render({"question": "What is 600+600?"})


def test_hub_mmlu_maps_cais_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    repo = tmp_path / "hub" / "mmlu"
    repo.mkdir(parents=True)
    rows = [
        {"question": "q0", "subject": "anatomy", "choices": ["a", "b", "c", "d"], "answer": 2},
        {"question": "q1", "subject": "anatomy", "choices": ["a", "b", "c", "d"], "answer": 0},
        {"question": "q2", "subject": "virology", "choices": ["a", "b", "c", "d"], "answer": 3},
    ]
    (repo / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_items("mmlu", source=Hub(str(repo), "main"))
    assert [(it.id, it.reference["answer"]) for it in items] == [
        ("mmlu:anatomy/0", "C"),
        ("mmlu:anatomy/1", "A"),
        ("mmlu:virology/0", "D"),
    ]


def test_hub_source_needs_a_revision():
    with pytest.raises(ValueError, match="revision"):
        load_items("gsm8k", source=Hub("openai/gsm8k", ""))


# --------------------------------------------------------------------------- prompts


def test_prompts_follow_the_registered_conventions():
    gsm = load_items("gsm8k")[0].messages
    assert gsm == [{"role": "user", "content": gsm[0]["content"]}]
    assert gsm[0]["content"].endswith(
        "\nPlease reason step by step, and put your final answer within \\boxed{}."
    )
    mmlu = load_items("mmlu")[0].messages[0]["content"]
    assert mmlu.startswith(
        "Answer the following multiple choice question. The last line of "
        "your response should be of the following format: 'Answer: $LETTER'"
    )
    he = load_items("humaneval")[0]
    content = he.messages[0]["content"]
    assert "```python" in content and "completed function" in content
    assert content.endswith(he.reference["prompt"] + "```")
    for kind in VENDORED_KINDS:
        text = (W / kind / "task.yaml").read_text()
        assert "no_think" not in text and "enable_thinking" not in text


def test_rendering_interprets_nothing_but_placeholders():
    spec = load_task("gsm8k")
    tricky = "Is {{ question }} or {x} or \\boxed{1} or %s a trap?"
    assert spec.render({"question": tricky})[0]["content"].startswith(tricky + "\n")


def test_a_template_using_an_undeclared_field_is_refused(workloads_copy):
    f = workloads_copy / "gsm8k" / "task.yaml"
    f.write_text(f.read_text().replace("{{ question }}", "{{ questoin }}"))
    with pytest.raises(TaskDefinitionError, match="questoin"):
        load_task("gsm8k")
