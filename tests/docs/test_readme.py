"""The README is a front door: short, a line for every command, and links that land."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_at_most_250_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"


@pytest.mark.parametrize("page", ["README.md", "benchmarks/README.md"])
def test_every_relative_link_lands_on_a_file(page: str) -> None:
    path = ROOT / page
    links = [
        link
        for link in LINK.findall(path.read_text(encoding="utf-8"))
        if not re.match(r"^[a-z]+:", link)
    ]
    assert links, page
    for link in links:
        target = (path.parent / link.split("#")[0]).resolve()
        assert target.is_file(), f"{page}: link {link} names no file"


def test_every_command_has_its_line_in_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `specbench ")]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        mine = " ".join(row for row in rows if row.startswith(f"| `specbench {name}"))
        assert mine, f"`specbench {name}` has no line in the README's command table"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for verb in action.choices:
                    assert re.search(rf"\b{verb}\b", mine), (
                        f"`specbench {name} {verb}` is not in the README's command table"
                    )
