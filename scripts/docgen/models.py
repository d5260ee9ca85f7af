"""A reference of pydantic models, written from their JSON schema: a section per model,
a row per field. A field's text is its `Field(description=...)`; where it has none yet,
the comment beside the field in the model's source, in italics."""

from __future__ import annotations

import ast
import functools
import inspect
import io
import json
import textwrap
import tokenize
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from scripts.docgen import DocsError, cell


@functools.cache
def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class's own source: the one after it on its line,
    else the comment lines just above it (no blank line between). Fields inherited
    from a base are looked up in the base."""
    out: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if base is cls:
            continue
        if isinstance(base, type) and issubclass(base, BaseModel) and base is not BaseModel:
            out.update(field_comments(base))
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return out
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, the line holds only it)
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row = tok.start[0]
            alone = not lines[row - 1][: tok.start[1]].strip()
            comments[row] = (tok.string.lstrip("#").strip(), alone)
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    for stmt in body.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        after = [
            comments[r][0]
            for r in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)
            if r in comments and not comments[r][1]
        ]
        above: list[str] = []
        row = stmt.lineno - 1
        while row in comments and comments[row][1]:
            above.insert(0, comments[row][0])
            row -= 1
        text = " ".join(above + after).strip()
        if text:
            out[stmt.target.id] = text
        else:
            out.pop(stmt.target.id, None)  # redefined here without one
    return out


class _WithComments(GenerateJsonSchema):
    """The JSON schema, with each model's class and, for a field without a description,
    its source comment under `x-comment`."""

    def model_schema(self, schema: Any) -> dict[str, Any]:
        js = super().model_schema(schema)
        cls = schema["cls"]
        js["x-class"] = f"{cls.__module__}.{cls.__qualname__}"
        comments = field_comments(cls)
        fields = {field.alias or name: (name, field) for name, field in cls.model_fields.items()}
        for key, prop in js.get("properties", {}).items():
            name, field = fields.get(key, (key, None))
            if "description" not in prop and name in comments:
                prop["x-comment"] = comments[name]
            if field is not None and field.default_factory is not None and "default" not in prop:
                value = field.default_factory()
                prop["x-default"] = (
                    "its own defaults" if isinstance(value, BaseModel) else f"`{json.dumps(value)}`"
                )
        return js


def _ref(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref") or next((s.get("$ref") for s in schema.get("allOf", [])), None)
    return ref.rsplit("/", 1)[-1] if ref else None


def type_text(schema: dict[str, Any]) -> str:
    """A JSON schema type in words, a model as a link to its section."""
    name = _ref(schema)
    if name:
        return f"[{name}](#{name.lower()})"
    if "const" in schema:
        return f"`{schema['const']}`"
    if "enum" in schema:
        return " or ".join(
            f"`{json.dumps(v) if not isinstance(v, str) else v}`" for v in schema["enum"]
        )
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = [type_text(s) for s in schema[key] if s.get("type") != "null"]
            nullable = len(parts) < len(schema[key])
            return " or ".join(parts) + (" or null" if nullable else "")
    kind = schema.get("type")
    if kind == "array":
        if "prefixItems" in schema:
            return "[" + ", ".join(type_text(s) for s in schema["prefixItems"]) + "]"
        return "list of " + type_text(schema.get("items", {})) if schema.get("items") else "list"
    if kind == "object":
        values = schema.get("additionalProperties")
        return "map of " + type_text(values) if isinstance(values, dict) and values else "object"
    words = {
        "string": "text",
        "integer": "integer",
        "number": "number",
        "boolean": "true/false",
        "null": "null",
    }
    text = words.get(kind, "any") if kind else "any"
    limits = [
        f"{sign} {schema[key]}"
        for key, sign in (
            ("exclusiveMinimum", ">"),
            ("minimum", ">="),
            ("exclusiveMaximum", "<"),
            ("maximum", "<="),
            ("minLength", "length >="),
            ("maxLength", "length <="),
        )
        if key in schema
    ]
    if "pattern" in schema:
        limits.append(f"matching `{schema['pattern']}`")
    return text + (f" ({', '.join(limits)})" if limits else "")


def _default_text(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" not in prop:
        return prop.get("x-default", "")
    value = prop["default"]
    return f"`{value}`" if isinstance(value, str) else f"`{json.dumps(value)}`"


def _children(schema: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """(suffix, model name) for each model a property reaches: `x`, `x[]`, `x.<key>`."""
    if name := _ref(schema):
        yield "", name
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            yield from _children(sub)
    if isinstance(schema.get("items"), dict):
        for suffix, name in _children(schema["items"]):
            yield "[]" + suffix, name
    for sub in schema.get("prefixItems", []):
        for suffix, name in _children(sub):
            yield "[]" + suffix, name
    if isinstance(schema.get("additionalProperties"), dict):
        for suffix, name in _children(schema["additionalProperties"]):
            yield ".<key>" + suffix, name


def _inline_enums(node: Any, defs: dict[str, dict[str, Any]]) -> Any:
    """A def that is no model (an enum, e.g. harness.rundir.cell.Stage) written in place
    of each $ref to it: its values are the field's type, it gets no section of its own."""
    if isinstance(node, list):
        return [_inline_enums(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    target = defs.get(node.get("$ref", "").rpartition("/")[2])
    if target is not None and "x-class" not in target:
        kept = {k: v for k, v in target.items() if k not in ("title", "description")}
        node = kept | {k: v for k, v in node.items() if k != "$ref"}
    return {k: _inline_enums(v, defs) for k, v in node.items()}


def model_reference(
    roots: dict[str, list[type[BaseModel]]], heading: str = "##", require_descriptions: bool = False
) -> str:
    """A section per model, the roots first and then each model where it is first
    reached, each with the paths it is reached at (a root's label, then `a.b[]`), its
    text and a table of its fields. `roots` maps a label (a file name, or "" for the
    document itself) to the models at its top."""
    models = [m for ms in roots.values() for m in ms]
    _, top = models_json_schema([(m, "validation") for m in models], schema_generator=_WithComments)
    defs: dict[str, dict[str, Any]] = top.get("$defs", {})
    defs = {n: _inline_enums(d, defs) for n, d in defs.items() if "x-class" in d}
    by_class = {d["x-class"]: name for name, d in defs.items() if "x-class" in d}
    paths: dict[str, list[str]] = {}
    order: list[str] = []
    queue = [
        (label, by_class[f"{m.__module__}.{m.__qualname__}"])
        for label, ms in roots.items()
        for m in ms
    ]
    while queue:  # breadth first: a model's section follows the first one that reaches it
        path, name = queue.pop(0)
        seen = name in paths
        paths.setdefault(name, [])
        if path not in paths[name]:
            paths[name].append(path)
        if seen:
            continue
        order.append(name)
        for field, prop in defs[name].get("properties", {}).items():
            for suffix, child in _children(prop):
                queue.append((f"{path}.{field}{suffix}" if path else f"{field}{suffix}", child))
    missing = [
        f"{name}.{field}"
        for name in order
        for field, prop in defs[name].get("properties", {}).items()
        if "description" not in prop
    ]
    if require_descriptions and missing:
        raise DocsError(
            f"{len(missing)} fields have no Field(description=...): " + ", ".join(missing)
        )
    total = sum(len(defs[name].get("properties", {})) for name in order)
    head = f"{len(order)} models, {total} fields"
    out = [
        f"{head}, each described by its `Field(description=...)`."
        if not missing
        else f"{head}; {total - len(missing)} fields described by `Field(description=...)`, the"
        f" rest by the comment beside them in the source (*in italics*).",
        "",
    ]
    for name in order:
        d = defs[name]
        module, _, cls = d["x-class"].rpartition(".")
        where = ", ".join(f"`{p}`" if p else "the top level" for p in paths[name])
        out += [
            f"{heading} {name} {{#{name.lower()}}}",
            "",
            f"At {where}. Model `{cls}` in `{module.replace('.', '/')}.py`.",
            "",
        ]
        if d.get("description"):
            out += [" ".join(d["description"].split()), ""]
        required = set(d.get("required", []))
        out += ["| field | type | default | what it is |", "|---|---|---|---|"]
        for field, prop in d.get("properties", {}).items():
            text = prop.get("description") or (
                f"*{prop['x-comment']}*" if "x-comment" in prop else ""
            )
            if "since" in prop:
                text += f" (written from format {prop['since']})"
            out.append(
                f"| `{field}` | {cell(type_text(prop))} |"
                f" {cell(_default_text(prop, field in required))} | {cell(text)} |"
            )
        out.append("")
    return "\n".join(out)
