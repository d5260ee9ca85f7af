"""Task definitions as data: workloads/<kind>/task.yaml (lm-evaluation-harness style).

A task file declares the data files, the fields a prompt may use, the chat
messages with ``{{ field }}`` placeholders, and the scorer with its extraction
steps (named steps of harness/workloads/steps.py, which the scorer runs).
Rendering replaces each placeholder with the field's text and interprets nothing
else, so a question containing braces, backslashes or ``{{`` is passed through
verbatim.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import yaml
from pydantic import ValidationError

from harness import paths
from harness.workloads.kinds import SCORED_KINDS, TASK_KINDS
from harness.workloads.steps import Extraction, ScorerSection, StepCall, describe, run_steps

__all__ = ["TASK_KINDS", "TaskDefinitionError", "TaskTemplate", "load_task", "task_path"]
_ROLES = ("system", "user", "assistant")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class TaskDefinitionError(ValueError):
    """A task.yaml that does not say what the loader needs."""


@dataclass(frozen=True)
class TaskTemplate:
    kind: str
    path: Path
    description: str
    files: tuple[str, ...]
    fields: tuple[str, ...]
    messages: tuple[tuple[str, str], ...]  # (role, template)
    scorer: str | None
    hub_hint: dict | None = None  # default hub dataset/config/split for this task
    extract: tuple[StepCall, ...] = ()  # scorer.extract: the declared extraction steps

    def extract_answer(self, response: str) -> Extraction:
        """Run the declared extraction steps on one reply."""
        if self.scorer is None:
            raise ValueError(f"{self.kind}: task.yaml declares no scorer to extract with")
        return run_steps(self.extract, response)

    def render(self, fields: dict[str, str]) -> list[dict]:
        """OpenAI chat messages for one item's fields."""
        missing = [f for f in self.fields if f not in fields]
        if missing:
            raise KeyError(f"{self.kind}: item lacks field(s) {missing}")
        out = []
        for role, template in self.messages:
            content = _PLACEHOLDER.sub(lambda m: str(fields[m.group(1)]), template)
            out.append({"role": role, "content": content})
        return out


def task_path(kind: str) -> Path:
    return paths.WORKLOADS_DIR / kind / "task.yaml"


def load_task(kind: str) -> TaskTemplate:
    if kind not in TASK_KINDS:
        raise ValueError(f"unknown task kind {kind!r}; known: {', '.join(TASK_KINDS)}")
    path = task_path(kind)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise TaskDefinitionError(f"{path}: missing task definition") from err
    except yaml.YAMLError as err:
        raise TaskDefinitionError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(doc, dict):
        raise TaskDefinitionError(f"{path}: expected a mapping")

    def fail(what: str) -> NoReturn:
        raise TaskDefinitionError(f"{path}: {what}")

    def need(cond: object, what: str) -> None:
        if not cond:
            fail(what)

    need(doc.get("task") == kind, f"'task' must be {kind!r}")
    data = doc.get("data")
    if not isinstance(data, dict):
        fail("'data' must be a mapping")
    files = data.get("files")
    if not (isinstance(files, list) and files and all(isinstance(f, str) for f in files)):
        fail("'data.files' must be a non-empty list of file names")
    fields = doc.get("fields")
    if not (isinstance(fields, dict) and fields):
        fail("'fields' must map field names to descriptions")
    messages = doc.get("messages")
    if not (isinstance(messages, list) and messages):
        fail("'messages' must be a non-empty list")
    rendered: list[tuple[str, str]] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            fail(f"messages[{i}] must be a mapping")
        role, content = msg.get("role"), msg.get("content")
        if not (isinstance(role, str) and role in _ROLES):
            fail(f"messages[{i}].role must be one of {_ROLES}")
        if not (isinstance(content, str) and content):
            fail(f"messages[{i}].content must be text")
        for name in _PLACEHOLDER.findall(content):
            need(name in fields, f"messages[{i}] uses {{{{ {name} }}}}, not declared in 'fields'")
        rendered.append((role, content))
    need(rendered[-1][0] == "user", "the last message must be the user's")
    raw_scorer = doc.get("scorer") or {}
    need(isinstance(raw_scorer, dict), "'scorer' must be a mapping")
    try:
        section = ScorerSection.model_validate(raw_scorer)
    except ValidationError as err:
        raise TaskDefinitionError(f"{path}: {describe(err, 'scorer')}") from None
    scorer = section.name
    need(scorer in (None, kind), f"'scorer.name' must be {kind!r} or null")
    if kind in SCORED_KINDS:
        need(scorer == kind, f"'scorer.name' must be {kind!r} (a scored task kind)")
        need(bool(section.extract), "'scorer.extract' must list the extraction steps")
    else:
        need(scorer is None, f"'scorer.name' must be null ({kind!r} has no correctness scorer)")
        need(not section.extract, "'scorer.extract' is for scored tasks; this one has no scorer")
    return TaskTemplate(
        kind=kind,
        path=path,
        description=str(doc.get("description", "")),
        files=tuple(files),
        fields=tuple(fields),
        messages=tuple(rendered),
        scorer=scorer,
        extract=tuple(section.extract),
        hub_hint=data.get("hub_hint") if isinstance(data.get("hub_hint"), dict) else None,
    )
