"""Declared extraction: task.yaml's steps are validated, run by the scorer, and read
exactly what the code before them read; the task kinds are one list."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from typing import get_args

import pytest

from harness import paths
from harness.prereg import schema
from harness.workloads import data, kinds, load_items, score_items, scoring, steps
from harness.workloads.declared import extract_gsm8k
from harness.workloads.extract import MMLU_ANSWER, humaneval_program
from harness.workloads.templates import TaskDefinitionError, load_task
from tests.workloads import legacy_extract as legacy
from tests.workloads.test_extract import CODE_CASES, GSM8K_CASES, MMLU_CASES

W = paths.WORKLOADS_DIR
ROOT = W.parent


# --------------------------------------------------------------------------- one list of kinds


def test_the_task_kinds_are_one_list():
    assert kinds.TASK_KINDS == ("chat", "gsm8k", "humaneval", "mmlu", "speed_bench")
    assert kinds.VENDORED_KINDS == ("chat", "gsm8k", "humaneval", "mmlu")
    schema_kinds = get_args(schema.TaskSpec.model_fields["kind"].annotation)
    assert schema_kinds == kinds.TASK_KINDS
    assert tuple(data._BUILDERS) == kinds.TASK_KINDS
    on_disk = tuple(sorted(p.parent.name for p in W.glob("*/task.yaml")))
    assert on_disk == kinds.TASK_KINDS
    declared = tuple(k for k in kinds.TASK_KINDS if load_task(k).scorer is not None)
    assert declared == kinds.SCORED_KINDS
    assert scoring.SCORED_KINDS is kinds.SCORED_KINDS
    from harness.workloads import SCORED_KINDS, TASK_KINDS
    from harness.workloads.templates import TASK_KINDS as template_kinds

    assert TASK_KINDS is template_kinds is kinds.TASK_KINDS and SCORED_KINDS is kinds.SCORED_KINDS


def test_a_table_that_misses_a_kind_is_refused():
    with pytest.raises(
        RuntimeError,
        match=r"missing kind\(s\) \['mmlu', 'speed_bench'\]"
        r".*unknown kind\(s\) \['x'\]",
    ):
        kinds.per_kind({"chat": 1, "gsm8k": 2, "humaneval": 3, "x": 4}, "a table")
    assert list(kinds.per_kind({k: k for k in reversed(kinds.TASK_KINDS)}, "t")) == list(
        kinds.TASK_KINDS
    )


def _task(kind: str, uses: list[str]) -> dict:
    return {"name": "t", "kind": kind, "uses": uses, "max_tokens": 16}


def test_the_schema_takes_its_kinds_and_scorers_from_the_list():
    assert schema.TaskSpec.model_validate(_task("mmlu", ["accuracy"])).kind == "mmlu"
    with pytest.raises(ValueError, match="chat has no correctness scorer"):
        schema.TaskSpec.model_validate(_task("chat", ["accuracy"]))
    with pytest.raises(ValueError, match="'chat', 'gsm8k', 'humaneval', 'mmlu' or 'speed_bench'"):
        schema.TaskSpec.model_validate(_task("squad", ["speed"]))


def test_the_schema_loads_the_kinds_without_the_workloads_code():
    code = (
        "import sys, harness.prereg.schema; "
        "print(sorted(m for m in sys.modules if m.startswith('harness.workloads')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['harness.workloads', 'harness.workloads.kinds']"


# --------------------------------------------------------------------------- the declarations


def test_each_scored_task_declares_its_steps():
    assert load_task("chat").extract == ()
    with pytest.raises(ValueError, match="declares no scorer"):
        load_task("chat").extract_answer("hi")
    for kind in kinds.SCORED_KINDS:
        spec = load_task(kind)
        assert spec.extract and spec.extract[0].name == "strip_think", kind


def test_the_mmlu_regex_is_the_documented_one():
    (regex,) = [c for c in load_task("mmlu").extract if c.name == "regex"]
    assert regex.args.pattern == MMLU_ANSWER.pattern
    assert (regex.args.group, regex.args.take) == (1, "last")


def test_the_readme_documents_every_step():
    readme = (W / "README.md").read_text(encoding="utf-8")
    for name in steps.known_steps():
        assert f"`{name}`" in readme, name
    for kind in steps.STEPS.values():
        assert kind.summary, kind.name


@pytest.fixture
def workloads_copy(tmp_path, monkeypatch):
    dst = tmp_path / "workloads"
    shutil.copytree(W, dst)
    monkeypatch.setattr(paths, "WORKLOADS_DIR", dst)
    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    return dst


def _edit(root, kind: str, old: str, new: str) -> str:
    f = root / kind / "task.yaml"
    text = f.read_text(encoding="utf-8")
    assert old in text
    f.write_text(text.replace(old, new, 1), encoding="utf-8")
    return str(f)


@pytest.mark.parametrize(
    ("kind", "old", "new", "message"),
    [
        (
            "gsm8k",
            "steps: [last_boxed, number]",
            "steps: [last_boxd, number]",
            r"scorer\.extract\[1\]\.first_of\[0\]\.steps\[0\]: unknown extraction step "
            r"'last_boxd'; registered: answer_phrase, code_block, first_of, ",
        ),
        (
            "mmlu",
            "group: 1",
            "group: 2",
            r"scorer\.extract\[1\]: regex: group 2: the pattern has 1 group\(s\)",
        ),
        (
            "mmlu",
            "take: last",
            "take: final",
            r"scorer\.extract\[1\]: regex\.take: Input should be 'first' or 'last'",
        ),
        (
            "mmlu",
            "take: last",
            "take: last\n        flags: i",
            r"scorer\.extract\[1\]: regex\.flags: Extra inputs are not permitted",
        ),
        (
            "mmlu",
            "pattern: '(?i:answer)",
            "pattern: '((?i:answer)",
            r"scorer\.extract\[1\]: regex\.pattern: not a valid regular expression",
        ),
        (
            "humaneval",
            "languages: [python, py, python3]",
            "languages: []",
            r"scorer\.extract\[1\]\.first_of\[0\]\.steps\[0\]: code_block\.languages: ",
        ),
        (
            "gsm8k",
            "  - strip_think",
            "  - strip_think: {all: true}",
            r"scorer\.extract\[0\]: step 'strip_think' takes no arguments",
        ),
        (
            "gsm8k",
            "- label: last-number",
            "- label: boxed",
            r"scorer\.extract\[1\]: first_of branch labels must differ",
        ),
        (
            "gsm8k",
            "  compare:",
            "  comparer: x\n  compare:",
            r"scorer\.comparer: Extra inputs are not permitted",
        ),
        (
            "mmlu",
            "  extract:",
            "  extract: []\n  old_extract:",
            r"scorer\.old_extract: Extra inputs",
        ),
        (
            "gsm8k",
            "  name: gsm8k",
            "  name: null",
            r"'scorer\.name' must be 'gsm8k' \(a scored task kind\)",
        ),
        (
            "chat",
            "  name: null",
            "  name: null\n  extract: [strip_think]",
            r"'scorer\.extract' is for scored tasks",
        ),
    ],
)
def test_a_bad_declaration_is_one_line_naming_file_and_field(
    workloads_copy, kind, old, new, message
):
    path = _edit(workloads_copy, kind, old, new)
    with pytest.raises(TaskDefinitionError) as err:
        load_task(kind)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and "\n" not in text, text
    assert re.search(message, text), text


def test_the_scorer_runs_exactly_the_declared_steps(workloads_copy):
    item = load_items("gsm8k")[0]
    gold = item.reference["answer"]
    reply = f"\\boxed{{{gold}}} but the answer is {int(gold) + 1}."
    (before,) = score_items("gsm8k", {item.id: item}, {item.id: reply})
    assert before.correct and before.detail == f"read by boxed; gold {gold}"
    _edit(
        workloads_copy,
        "gsm8k",
        "        - label: boxed\n          steps: [last_boxed, number]\n",
        "",
    )
    (after,) = score_items("gsm8k", {item.id: item}, {item.id: reply})
    assert not after.correct and after.detail == f"read by answer-phrase; gold {gold}"
    assert extract_gsm8k(reply) == (str(int(gold) + 1), "answer-phrase")


def test_run_steps_semantics():
    calls = steps.ScorerSection.model_validate(
        {
            "extract": [
                "strip_think",
                {"regex": {"pattern": r"x=(?P<v>\d+)", "group": "v"}},
            ]
        }
    ).extract
    assert steps.run_steps(calls, "x=1 x=2") == steps.Extraction("1", "regex")
    assert steps.run_steps(calls, "nothing") == steps.Extraction(None, "none")
    assert steps.run_steps([], "as is") == steps.Extraction("as is", "as-is")


# --------------------------------------------------------------------------- same answers as before

# Replies that are not tied to an item: the extraction tests' tables plus edge cases
# of the phrase and number rules.
EXTRA_REPLIES = [
    "The answer is 5/0.",
    "The answer is 5, not 6",
    "answer{,}: 5",
    "The answer is: -.5",
    "answer is" + " " * 90 + "12345",
    "answer is" + " " * 77 + "12345",
    "Answer = 3/4",
    "The answer is \\$1{,}200.",
    "The answer is \u22127",
    "\\boxed{\\frac{1}{0}} so 4",
    "\\boxed{abc} The answer is 9",
    "\\boxed{} \\boxed{2",
    "answer is answer is 3",
    "**Answer:** $\\boxed{B}$",
    "Answer: (A) or Answer: **D**",
    "Answer:\nB",
    "Answer: B\u200b",
    "```python\n```",
    "```\n```python\nx\n```",
    "``` python\ny=1\n```",
    "````python\nz\n````",
    "<think></think>",
    "<THINK>a</THINK>Answer: A",
    "answer is 1e5",
    "answer: 0.000",
]
FREE_REPLIES = (
    [r for r, *_ in GSM8K_CASES]
    + [r for r, _ in MMLU_CASES]
    + [r for r, _ in CODE_CASES]
    + EXTRA_REPLIES
)


def _gsm8k_replies(solution: str, gold: str) -> list[str]:
    steps_text = re.sub(r"<<[^>]*>>", "", solution.rsplit("####", 1)[0]).strip()
    value = int(gold) if re.fullmatch(r"-?\d+", gold) else None
    commas = f"{value:,}" if value is not None else gold
    wrong = str(value + 1) if value is not None else "0"
    neg = gold.replace("-", "\u2212")
    return [
        solution,  # the reference solution itself: calculator notes and '#### N'
        f"{steps_text}\n\nThe answer is {gold}.",
        f"{steps_text}\n\n**Final Answer**\n\\[\n\\boxed{{{commas}}}\n\\]",
        f"Let's solve it.\n{steps_text}\nSo the total is $\\boxed{{\\$ {commas}}}$.",
        f"{steps_text}\nThe final answer is $\\boxed{{{gold} \\text{{ dollars}}}}$",
        f"\\boxed{{{wrong}}}\nWait, that is wrong. {steps_text}\n\\boxed{{{gold}}}",
        f"<think>{solution}</think>\n{steps_text}\nThe answer is \\({neg}\\).",
        f"<think>\n{steps_text}\nHmm, so maybe {wrong}",
        f"{steps_text}\nFinal answer: {commas} (not {wrong})",
        f"\\boxed{{\\frac{{{gold}}}{{1}}}} \\boxed{{}}",
        f"{steps_text}\n\n#### {commas}",
        f"Answer: ${commas}.00\n\nI hope this helps! 1 more question?",
    ]


def _mmlu_replies(prompt: str, gold: str, choices: list[str]) -> list[str]:
    other = "ABCD"[("ABCD".index(gold) + 1) % 4]
    text = choices["ABCD".index(gold)]
    return [
        f"Answer: {gold}",
        f"Let's think step by step.\n{prompt}\n\nThe best choice is {text}.\n\nAnswer: {gold}",
        prompt,  # the prompt echoed: its 'Answer: $LETTER' must not be read
        f"**Answer: ({gold})**",
        f"Answer: $\\boxed{{{gold}}}$",
        f"The answer is {gold}) {text}",
        f"Answer: {text}",
        f"answer: {gold.lower()}",
        f"Answer: {other}\nOn reflection, that is wrong.\nAnswer: {gold}.",
        f"<think>Answer: {other}</think>\nAnswer: {gold}",
        f"<think>Answer: {gold}, or maybe",
        f"{gold}) {text}\nANSWER:{gold}",
        f"Answer: {gold}{other}",
    ]


def _humaneval_replies(prompt: str, solution: str) -> list[str]:
    full = prompt + solution
    return [
        f"```python\n{full}```",
        f"Here is the completed function:\n\n```python\n{full}```\n\nIt works because...",
        solution,  # the body alone, no fence
        full,
        f"```py\n{solution}```",
        f"```\n{full}```",
        f"```python\n{full}",  # unclosed
        f"```bash\npip install numpy\n```\n```python\n{full}```",
        f"```\nsome output\n```\n```Python\n{full}```",
        f"```python3 title=solution.py\n{full}```",
        f"<think>```python\n{prompt}    pass\n```</think>\n```python\n{full}```",
        f"```text\n{full}```",
        "",
    ]


def _rows(name: str) -> list[dict]:
    lines = (W / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_gsm8k_declared_steps_read_what_the_old_code_read():
    spec = load_task("gsm8k")
    items = load_items("gsm8k")
    rows = _rows("gsm8k/test.jsonl")
    assert len(rows) == len(items) == 1319
    replies: dict[str, str] = {}
    rules = set()
    for i, (item, row) in enumerate(zip(items, rows, strict=True)):
        cases = _gsm8k_replies(row["answer"], item.reference["answer"])
        for reply in cases:
            got = spec.extract_answer(reply)
            assert (got.value, got.rule) == legacy.extract_gsm8k(reply), (item.id, reply)
            rules.add(got.rule)
        replies[item.id] = cases[i % len(cases)]
    for reply in FREE_REPLIES:
        got = spec.extract_answer(reply)
        assert (got.value, got.rule) == legacy.extract_gsm8k(reply), reply
        rules.add(got.rule)
    assert rules == {"boxed", "answer-phrase", "last-number", "none"}
    # The scores (answer, verdict and detail) are the old ones, item by item.
    by_id = {it.id: it for it in items}
    for s in score_items("gsm8k", by_id, replies):
        gold = by_id[s.id].reference["answer"]
        extracted, rule = legacy.extract_gsm8k(replies[s.id])
        how = "no number found" if extracted is None else f"read by {rule}"
        assert (s.extracted, s.correct, s.detail) == (
            extracted,
            legacy.gsm8k_equal(extracted, gold),
            f"{how}; gold {gold}",
        )


def test_mmlu_declared_steps_read_what_the_old_code_read():
    spec = load_task("mmlu")
    items = load_items("mmlu")
    rows = {f"mmlu:{r['id']}": r for r in _rows("mmlu/mmlu_test_sample.jsonl")}
    assert len(items) == len(rows) == 1000
    replies: dict[str, str] = {}
    for i, item in enumerate(items):
        gold = item.reference["answer"]
        cases = _mmlu_replies(item.messages[-1]["content"], gold, rows[item.id]["choices"])
        for reply in cases:
            assert spec.extract_answer(reply).value == legacy.extract_mmlu(reply), (item.id, reply)
        replies[item.id] = cases[i % len(cases)]
    for reply in FREE_REPLIES:
        assert spec.extract_answer(reply).value == legacy.extract_mmlu(reply), reply
    by_id = {it.id: it for it in items}
    for s in score_items("mmlu", by_id, replies):
        gold = by_id[s.id].reference["answer"]
        letter = legacy.extract_mmlu(replies[s.id])
        how = "no 'Answer: X' line" if letter is None else "read 'Answer: X'"
        assert (s.extracted, s.correct, s.detail) == (letter, letter == gold, f"{how}; gold {gold}")


def test_humaneval_declared_steps_read_what_the_old_code_read():
    spec = load_task("humaneval")
    items = load_items("humaneval")
    assert len(items) == 164
    for item in items:
        ref = item.reference
        for reply in _humaneval_replies(ref["prompt"], ref["canonical_solution"]):
            old = legacy.extract_code(reply)
            assert spec.extract_answer(reply).value == old, (item.id, reply)
            program = legacy.humaneval_program(ref["prompt"], old, ref["test"], ref["entry_point"])
            assert scoring.humaneval_program_for(item, reply, spec) == (old, program)
            assert humaneval_program(ref["prompt"], old, ref["test"], ref["entry_point"]) == program
    for reply in FREE_REPLIES:
        assert spec.extract_answer(reply).value == legacy.extract_code(reply), reply
