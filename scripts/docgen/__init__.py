"""Markdown written from the code for the docs site: a reference of pydantic models
(`models.model_reference`, from their JSON schema) and of an argparse parser
(`commands.command_reference`). scripts/gen_docs.py puts them into the site's pages."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class DocsError(Exception):
    """A generated part that cannot be written: the build stops with this line."""


def cell(text: str) -> str:
    """Text fit for one table cell: one line, pipes escaped, and outside code spans `<`
    escaped (help text says `<study>-<time>`, which markdown would take for a tag)."""
    spans = " ".join(str(text).split()).replace("|", "\\|").split("`")
    return "`".join(s if i % 2 else s.replace("<", "&lt;") for i, s in enumerate(spans))
