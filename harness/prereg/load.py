"""Read a prereg YAML into a Study, with errors that name file, line and field path."""

from __future__ import annotations

import difflib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from harness.errors import InputError
from harness.prereg.schema import CrossReferenceError, Study

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Where:
    file: Path
    line: int  # 1-based


@dataclass
class LoadedStudy:
    study: Study
    path: Path
    arm_files: dict[str, Path]  # arm name -> file it was read from (inline arms absent)
    lines: _LineMap | None = None  # field path -> file and line it is written at

    def where(self, loc: Loc) -> Where:
        """The file and line a field is written at (its nearest written parent's)."""
        found = self.lines.lookup(loc) if self.lines is not None else None
        return found or Where(self.path, 1)


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


class _LineMap:
    """Field path -> where it is written, built from PyYAML's node tree."""

    def __init__(self) -> None:
        self.where: dict[Loc, Where] = {}

    def add(self, node: yaml.Node, file: Path, prefix: Loc) -> None:
        self.where[prefix] = Where(file, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = key_node.value
                self.where[prefix + (key,)] = Where(file, key_node.start_mark.line + 1)
                self.add(value_node, file, prefix + (key,))
                # The key's own line beats the value's for error messages.
                self.where[prefix + (key,)] = Where(file, key_node.start_mark.line + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.add(item, file, prefix + (i,))

    def lookup(self, loc: Loc) -> Where | None:
        for n in range(len(loc), -1, -1):
            hit = self.where.get(tuple(loc[:n]))
            if hit is not None:
                return hit
        return None


_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(InputError):
    """A mapping key written twice; its lines already name the file they are in."""


def _key_value(loader: yaml.SafeLoader, key: yaml.Node) -> Any:
    """The key as YAML means it (`1` and `"1"` differ), hashable for comparison."""
    try:
        value = loader.construct_object(key, deep=True)
        hash(value)
        return value
    except (yaml.YAMLError, TypeError):
        return (key.tag, repr(key.value))


def duplicate_keys(root: yaml.Node, path: Path, prefix: Loc) -> list[str]:
    """One line per mapping key written twice at the same place, at any depth.

    PyYAML keeps the last value without a word, so an appended block would silently
    replace a registered one. A merge key (`<<: *anchor`) is not a duplicate: the
    keys written beside it override the merged ones, as YAML specifies."""
    loader = yaml.SafeLoader("")
    problems: list[tuple[int, str]] = []
    seen: set[int] = set()  # an aliased node is one node: walk it once
    stack: list[tuple[yaml.Node, Loc]] = [(root, prefix)]
    while stack:
        node, loc = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, loc + (i,)) for i, item in enumerate(node.value))
        if not isinstance(node, yaml.MappingNode):
            continue
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = _key_value(loader, key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                problems.append(
                    (
                        line,
                        (
                            f"{path}:{line}: {format_loc(loc + (str(key),))}: duplicate key {key!r}"
                            f" (first at line {first_line[key]}); YAML would silently keep only"
                            " the later one"
                        ),
                    )
                )
            else:
                first_line[key] = line
            stack.append((value_node, loc + (str(key),)))
    return [message for _, message in sorted(problems)]


def _read_yaml(path: Path, lines: _LineMap, prefix: Loc) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {err}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}{line}: YAML syntax error: {err.problem or err}") from None
    except yaml.YAMLError as err:
        raise InputError(f"{path}: YAML syntax error: {err}") from None
    if node is not None:
        duplicates = duplicate_keys(node, path, prefix)
        if duplicates:
            raise DuplicateKeyError(*duplicates)
        lines.add(node, path, prefix)
    return data


def _resolve_arm_files(
    data: dict, study_path: Path, lines: _LineMap, problems: list[str]
) -> dict[int, Path]:
    """Replace `- file: arms/x.yaml` entries with that file's mapping."""
    arms = data.get("arms")
    sources: dict[int, Path] = {}
    if not isinstance(arms, list):
        return sources
    for i, entry in enumerate(arms):
        if not (isinstance(entry, dict) and "file" in entry):
            continue
        where = lines.lookup(("arms", i)) or Where(study_path, 1)
        if set(entry) != {"file"} or not isinstance(entry["file"], str):
            problems.append(
                f"{where.file}:{where.line}: arms[{i}]: an arm reference is exactly"
                " `file: <path to an arm YAML>`"
            )
            continue
        arm_path = (study_path.parent / entry["file"]).resolve()
        try:
            arm_data = _read_yaml(arm_path, lines, ("arms", i))
        except DuplicateKeyError as err:
            problems.extend(err.lines)
            continue
        except InputError as err:
            problems.append(f"{where.file}:{where.line}: arms[{i}].file: {err.lines[0]}")
            continue
        if not isinstance(arm_data, dict):
            problems.append(f"{arm_path}:1: arms[{i}]: expected a mapping of arm fields")
            continue
        arms[i] = arm_data
        sources[i] = arm_path
    return sources


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model that holds the last key of `loc`, for 'did you mean'."""
    model: Any = Study
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        field = _field(model, str(part))
        if field is None:
            return None
        model = _unwrap(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _field(model: type[BaseModel], key: str):
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field
    return None


def _unwrap(annotation: Any) -> Any:
    """list[X] / X | None / Annotated[X, ...] -> X (the first model inside)."""
    for arg in typing.get_args(annotation) or ():
        inner = _unwrap(arg)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return annotation


def _message(err: ErrorDetails, loc: Loc) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc)
        if model is not None:
            keys = [f.alias or n for n, f in model.model_fields.items()]
            close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return f"unknown key (expected one of: {', '.join(keys)}){hint}"
        return "unknown key"
    if kind == "missing":
        return "required field is missing"
    msg = err["msg"]
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _clean_loc(loc: Loc) -> Loc:
    # Pydantic adds the type of a union member tried (e.g. 'int', 'literal[...]',
    # 'function-after[...]') to the location; users think in field paths only.
    return tuple(
        p
        for p in loc
        if isinstance(p, int)
        or not any(ch in p for ch in "[]()")
        and p not in {"int", "str", "float", "bool", "list", "dict"}
    )


def load_study_file(path: str | Path) -> LoadedStudy:
    """Parse, resolve arm files and validate. Raises InputError listing every problem."""
    study_path = Path(path)
    lines = _LineMap()
    data = _read_yaml(study_path, lines, ())
    if not isinstance(data, dict):
        raise InputError(f"{study_path}:1: expected a mapping of study fields at the top level")
    problems: list[str] = []
    sources = _resolve_arm_files(data, study_path, lines, problems)
    if problems:
        raise InputError(*problems)
    try:
        study = Study.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = _clean_loc(tuple(err["loc"]))
            cross = (err.get("ctx") or {}).get("error")
            if isinstance(cross, CrossReferenceError):
                for sub_loc, msg in cross.problems:
                    full = loc + tuple(sub_loc)
                    where = lines.lookup(full) or Where(study_path, 1)
                    problems.append(f"{where.file}:{where.line}: {format_loc(full)}: {msg}")
                continue
            where = lines.lookup(loc) or Where(study_path, 1)
            problems.append(f"{where.file}:{where.line}: {format_loc(loc)}: {_message(err, loc)}")
        raise InputError(*problems) from None
    arm_files = {study.arms[i].name: p for i, p in sources.items()}
    return LoadedStudy(study=study, path=study_path, arm_files=arm_files, lines=lines)


def load_study(path: str | Path) -> Study:
    return load_study_file(path).study
