"""`specbench score TASK RESPONSES.jsonl [--per-item OUT.jsonl]`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness import paths
from harness.cli import COMMAND_MODULES, main
from harness.workloads import load_items, wilson_interval


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _run(capsys, *argv):
    code = main(["score", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_registered_in_the_cli():
    assert COMMAND_MODULES["score"] == "harness.commands.score"


def test_gsm8k_summary_and_per_item(tmp_path, capsys):
    gold = {it.id: it.reference["answer"] for it in load_items("gsm8k")[:4]}
    rows = [
        {"id": "gsm8k:0", "response": f"So \\boxed{{{gold['gsm8k:0']}}}."},
        {"id": "gsm8k:1", "response": f"The final answer is {gold['gsm8k:1']}."},
        {"id": "gsm8k:2", "response": "I don't know", "extra": "ignored"},
        {"id": "gsm8k:3", "response": "\\boxed{-1}"},
    ]
    out_path = tmp_path / "sub" / "per_item.jsonl"
    code, out, err = _run(
        capsys, "gsm8k", _write(tmp_path / "r.jsonl", rows), "--per-item", out_path
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary == {
        "task": "gsm8k",
        "n": 4,
        "correct": 2,
        "accuracy": 0.5,
        "ci95": list(wilson_interval(2, 4)),
    }
    per_item = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert [p["id"] for p in per_item] == [r["id"] for r in rows]
    assert all(set(p) == {"id", "extracted", "correct", "detail"} for p in per_item)
    assert [p["correct"] for p in per_item] == [True, True, False, False]
    assert per_item[0]["extracted"] == gold["gsm8k:0"]
    assert per_item[2]["extracted"] is None


def test_mmlu(tmp_path, capsys):
    items = load_items("mmlu")[:3]
    rows = [
        {"id": it.id, "response": f"Reasoning...\nAnswer: {it.reference['answer']}"}
        for it in items[:2]
    ] + [{"id": items[2].id, "response": "no idea"}]
    code, out, _ = _run(capsys, "mmlu", _write(tmp_path / "r.jsonl", rows))
    assert code == 0
    assert json.loads(out)["correct"] == 2


@pytest.mark.parametrize("isolation", ["auto", "hook"])
def test_humaneval_with_the_real_harness_as_parent(tmp_path, isolation):
    """Run as its own process: the CLI is the harness the hostile programs try to kill.

    In hook mode the program's parent really is the CLI process."""
    items = load_items("humaneval")[:4]
    kill_parent = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    kill_by_name = (
        "import os, signal\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n        try:\n"
        "            cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n        except OSError:\n"
        "            continue\n        if b'harness.cli' in cmd:\n"
        "            os.kill(int(p), signal.SIGKILL)\n"
        "raise SystemExit('found no harness to kill')\n"
    )

    def full(it, before=""):
        return (
            "```python\n"
            + before
            + it.reference["prompt"]
            + it.reference["canonical_solution"]
            + "```"
        )

    rows = [
        {"id": items[0].id, "response": full(items[0])},
        {"id": items[1].id, "response": "    pass\n"},
        {"id": items[2].id, "response": full(items[2], kill_parent)},
        {"id": items[3].id, "response": full(items[3], kill_by_name)},
    ]
    out_path = tmp_path / "per_item.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "score",
            "humaneval",
            str(_write(tmp_path / "r.jsonl", rows)),
            "--per-item",
            str(out_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={
            **os.environ,
            "SPECBENCH_HOME": str(paths.PROJECT_ROOT),
            "SPECBENCH_SANDBOX": isolation,
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["correct"] == 1
    per_item = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert [p["correct"] for p in per_item] == [True, False, False, False]
    assert per_item[0]["extracted"].startswith(items[0].reference["prompt"][:20])
    assert all("[sandbox: " in p["detail"] for p in per_item)
    if isolation == "hook":
        assert "os.kill of another process is not allowed" in per_item[2]["detail"]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ['{"id": "gsm8k:0", "response": "1"}', '{"id": "gsm8k:1", "response": '],
            "line 2: bad JSON",
        ),
        (['{"id": "gsm8k:0"}'], "line 1: missing field 'response'"),
        (['{"response": "x"}'], "line 1: missing field 'id'"),
        (['{"id": "gsm8k:0", "response": null}'], "line 1: field 'response' must be a string"),
        (['{"id": 3, "response": "x"}'], "line 1: field 'id' must be a string, not int"),
        (['["gsm8k:0", "x"]'], "line 1: expected a JSON object"),
        (
            ['{"id": "gsm8k:0", "response": "1"}', "", '{"id": "gsm8k:99999", "response": "1"}'],
            "line 3: unknown id 'gsm8k:99999' for task gsm8k",
        ),
        (['{"id": "mmlu:anatomy/0", "response": "1"}'], "line 1: unknown id 'mmlu:anatomy/0'"),
        (
            ['{"id": "gsm8k:5", "response": "1"}', '{"id": "gsm8k:5", "response": "2"}'],
            "line 2: id 'gsm8k:5' repeats line 1",
        ),
        ([""], "no responses to score"),
    ],
)
def test_bad_input_exits_2_naming_the_line(tmp_path, capsys, lines, message):
    path = _write(tmp_path / "bad.jsonl", lines)
    code, out, err = _run(capsys, "gsm8k", path)
    assert code == 2
    assert out == ""
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_not_utf8(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        b'{"id": "gsm8k:0", "response": "ok"}\n{"id": "gsm8k:1", "response": "\xff"}\n'
    )
    code, _, err = _run(capsys, "gsm8k", path)
    assert code == 2 and "line 2: not UTF-8" in err


def test_missing_file_and_chat(tmp_path, capsys):
    code, _, err = _run(capsys, "gsm8k", tmp_path / "nope.jsonl")
    assert code == 2 and "cannot read" in err
    path = _write(tmp_path / "r.jsonl", [{"id": "chat:81", "response": "hi"}])
    code, _, err = _run(capsys, "chat", path)
    assert code == 2 and "no correctness scorer" in err


def test_unknown_task_is_an_argparse_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["score", "nope", str(tmp_path / "r.jsonl")])
    assert exc.value.code == 2
