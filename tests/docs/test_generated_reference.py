"""The docs site's generated references (scripts/gen_docs.py) reach every command, option
and field: walked here independently of the generator (argparse's own tree, pydantic's
own fields), so a command, a nested verb or a model the generator drops fails a test."""

from __future__ import annotations

import argparse
import re
import typing
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from harness.cli import build_parser
from scripts import gen_docs
from scripts.docgen import DocsError, cell
from scripts.docgen.models import field_comments, model_reference, type_text


def sections(markdown: str) -> dict[str, str]:
    """Each heading's title (its text before `{#...}`) -> the text up to the next heading."""
    out: dict[str, str] = {}
    parts = re.split(r"^#{2,6} (.+?)(?: \{#[^}]*\})?$", markdown, flags=re.MULTILINE)
    for title, body in zip(parts[1::2], parts[2::2], strict=True):
        out[title.strip()] = body
    return out


def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every subcommand's parser, nested verbs included, by argparse's own tree."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                out += [sub, *parsers(sub)]
    return out


def test_every_command_and_option_is_in_the_command_reference() -> None:
    reference = sections(gen_docs.commands())
    every = parsers(build_parser())
    assert len(every) >= 19  # 14 commands and the engines verbs
    for sub in every:
        title = f"`{sub.prog}`"
        assert title in reference, f"{sub.prog} has no section in the command reference"
        body = reference[title]
        assert f"```text\n{sub.prog} " in body or f"```text\n{sub.prog}\n" in body, sub.prog
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            names = action.option_strings or [str(action.metavar or action.dest)]
            for name in names:
                assert f"| `{name}" in body or f", {name}" in body, (
                    f"{sub.prog}: {name} is not in its table"
                )
            if action.help:
                assert cell(action.help.split("%")[0])[:40] in body, (
                    f"{sub.prog} {names[0]}: its help is not in the table"
                )


def models_reached(model: type[BaseModel]) -> set[type[BaseModel]]:
    """Every pydantic model a model's fields reach, through lists, dicts, unions and
    Annotated, by the fields' own annotations."""
    seen: set[type[BaseModel]] = set()

    def visit(tp: object) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp not in seen:
                seen.add(tp)
                for field in tp.model_fields.values():
                    visit(field.annotation)
            return
        for arg in typing.get_args(tp):
            visit(arg)

    visit(model)
    return seen


def field_keys(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def assert_every_field_documented(reference: str, roots: list[type[BaseModel]]) -> int:
    found = sections(reference)
    count = 0
    for root in roots:
        for model in models_reached(root):
            assert model.__name__ in found, f"model {model.__name__} has no section"
            body = found[model.__name__]
            assert f"Model `{model.__name__}` in `" in body, model
            for key in field_keys(model):
                assert f"\n| `{key}` |" in body, f"{model.__name__}.{key} is not in the reference"
                count += 1
    return count


def test_every_registration_field_is_in_the_registration_reference() -> None:
    from harness.prereg.schema import Study

    assert assert_every_field_documented(gen_docs.registration(), [Study]) > 150


def test_every_registration_field_is_described_by_its_own_description() -> None:
    """Every field of every model a registration reaches carries Field(description=...),
    read here from pydantic's own fields (not the generator's output)."""
    from harness.prereg.schema import Study

    assert "registration" in gen_docs.DESCRIBED_PARTS
    undescribed = [
        f"{model.__name__}.{name}"
        for model in models_reached(Study)
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not undescribed, undescribed
    assert "each described by its `Field(description=...)`" in gen_docs.registration()


def test_a_registration_field_without_a_description_fails_the_reference(monkeypatch) -> None:
    """Two models below the top, with a comment beside it: the reference refuses it, naming
    it (the strict build runs this part: tests/docs/test_site_build.py)."""
    from harness.prereg import schema

    class LooseRegime(schema.RegimeCheck):
        max_skew: float = 1.0  # a comment beside it is not a description

    class LooseRecording(schema.Recording):
        regime: LooseRegime = Field(default_factory=LooseRegime, description="the regime")

    class LooseStudy(schema.Study):
        recording: LooseRecording = Field(default_factory=LooseRecording, description="r")

    monkeypatch.setattr(schema, "Study", LooseStudy)
    with pytest.raises(
        DocsError,
        match=r"^1 fields have no Field\(description=\.\.\.\):"
        r" LooseRegime\.max_skew$",
    ):
        gen_docs.registration()


def test_every_run_folder_record_field_is_in_the_run_folder_reference() -> None:
    from harness.records import GpuSample, MetricSample, RequestRecord
    from harness.rundir import CellFile, CompleteFile, ScoreRecord
    from harness.rundir.manifest import Manifest
    from harness.rundir.verdict import Verdict

    reference = gen_docs.run_folder()
    roots: list[type[BaseModel]] = [
        Manifest,
        Verdict,
        CellFile,
        CompleteFile,
        ScoreRecord,
        RequestRecord,
        MetricSample,
        GpuSample,
    ]
    assert assert_every_field_documented(reference, roots) > 300
    # Each section says which file it is found in.
    assert "At `manifest.json`." in reference
    assert "`verdict.json.bars[]`" in reference


# --- the generator's own rules, on models made here ---------------------------------------


class Base(BaseModel):
    # inherited: described in the base
    inherited: int = 0


class Toy(Base):
    """A toy record."""

    # above, first line
    # above, second line
    above: int = 1
    trailing: str = "x"  # on its own line

    # a section comment, a blank line away: not the field's

    undocumented: float | None = None
    described: bool = Field(default=True, description="from Field(description)")  # not this
    listed: list[int] = Field(default_factory=lambda: [1, 2])
    nested: Annotated[list[Base], Field(max_length=3)] = []


def test_field_comments_reads_the_lines_above_and_after_a_field() -> None:
    comments = field_comments(Toy)
    assert comments["above"] == "above, first line above, second line"
    assert comments["trailing"] == "on its own line"
    assert comments["inherited"] == "inherited: described in the base"
    assert "undocumented" not in comments


def test_a_description_wins_over_a_comment_and_comments_are_marked() -> None:
    text = model_reference({"toy.json": [Toy]})
    rows = {
        line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")
    }
    assert "from Field(description)" in rows["`described`"]
    assert "not this" not in rows["`described`"]
    assert "*on its own line*" in rows["`trailing`"]
    assert "`[1, 2]`" in rows["`listed`"]  # a default_factory's value
    assert "list of [Base](#base)" in rows["`nested`"]
    assert "At `toy.json.nested[]`." in text
    assert text.startswith("2 models, 8 fields; 1 fields described by")


def test_an_enum_field_is_written_as_its_values_not_as_a_model() -> None:
    """Cell.stage is a harness.rundir.cell.Stage: its numbers are its type, in place, and
    the enum gets no section (it has no fields; a section of it broke the build)."""
    from harness.rundir import CellFile

    text = model_reference({"cell.json": [CellFile]})
    (row,) = [line for line in text.splitlines() if line.startswith("| `stage` |")]
    assert "| `1` or `2` or `3` or `4` or `5` | required |" in row
    assert "Stage" not in sections(text)


def test_require_descriptions_refuses_a_field_without_one() -> None:
    with pytest.raises(DocsError) as err:
        model_reference({"": [Toy]}, require_descriptions=True)
    assert "Toy.above" in str(err.value) and "Base.inherited" in str(err.value)
    assert "Toy.described" not in str(err.value)

    class Described(BaseModel):
        a: int = Field(description="an a")

    assert "an a" in model_reference({"": [Described]}, require_descriptions=True)


def test_a_page_marker_is_replaced_and_an_unknown_one_refused(monkeypatch) -> None:
    monkeypatch.setitem(gen_docs.PARTS, "toy", lambda: "GENERATED")
    page = "# Title\n\n<!-- generated: toy -->\n\nafter\n"
    assert gen_docs.expand(page) == "# Title\n\nGENERATED\n\nafter\n"
    with pytest.raises(DocsError, match="docs/x.md: unknown generated part 'nope'"):
        gen_docs.expand("<!-- generated: nope -->\n", "docs/x.md")


def test_every_page_marker_names_a_part() -> None:
    for page in gen_docs.ROOT.joinpath("docs").rglob("*.md"):
        if "_incoming" in page.parts:
            continue
        for name in gen_docs.MARKER.findall(page.read_text(encoding="utf-8")):
            assert name in gen_docs.PARTS, f"{page}: {name}"


def test_type_text_names_what_a_yaml_author_writes() -> None:
    assert type_text({"enum": ["flag", "remeasure"]}) == "`flag` or `remeasure`"
    assert (
        type_text({"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "null"}]})
        == "integer (> 0) or null"
    )
    assert (
        type_text({"type": "object", "additionalProperties": {"type": "string"}}) == "map of text"
    )
    assert (
        type_text({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "number"}]})
        == "[integer, number]"
    )
