"""One reply through the extraction steps its task declares (workloads/<kind>/task.yaml).

Kept apart from extract.py, whose rules the steps are built from: the steps module
imports extract, and these read the task files through templates, which imports the
steps; here nothing imports back.
"""

from __future__ import annotations

from harness.workloads.templates import TaskTemplate, load_task


def _declared(kind: str) -> TaskTemplate:
    return load_task(kind)


def extract_gsm8k(response: str) -> tuple[str | None, str]:
    """(extracted number as text, rule used), by the steps gsm8k/task.yaml declares.
    Rule: boxed, answer-phrase, last-number, or none."""
    found = _declared("gsm8k").extract_answer(response)
    return found.value, found.rule


def extract_mmlu(response: str) -> str | None:
    """The letter of the last 'Answer: X' line, or None (mmlu/task.yaml's steps)."""
    return _declared("mmlu").extract_answer(response).value


def extract_code(response: str) -> str:
    """First ```python block, else first unlabelled block, else the whole reply
    (humaneval/task.yaml's steps)."""
    code = _declared("humaneval").extract_answer(response).value
    return "" if code is None else code
