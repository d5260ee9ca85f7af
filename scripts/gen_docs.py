"""The docs site's generated parts, written at build time so they cannot go stale.

A page asks for one with a line of its own, `<!-- generated: NAME -->`; mkdocs runs this
file as a hook (mkdocs.yml `hooks:`) and puts the part there before the page is rendered:

- `commands`: every command and option of `specbench`, from the argparse parser itself
  (harness.cli.build_parser: each command module's `register`).
- `registration`: every field of a pre-registration, from the JSON schema of
  harness.prereg.schema.Study.
- `run-folder`: every record a run folder holds, from the JSON schema of the models that
  write and read it (harness.rundir, harness.records).

A field's text is its `Field(description=...)`; where a model has none yet, the comment
written beside the field in its source (the line after it, or the lines just above it),
marked as such. A part named in `DESCRIBED_PARTS` turns a field without a description into a
build error that names it.

    python scripts/gen_docs.py commands|registration|run-folder   # print one part
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # mkdocs loads this file by path, from any folder
    sys.path.insert(0, str(ROOT))

from scripts.docgen import DocsError  # noqa: E402
from scripts.docgen.commands import command_reference  # noqa: E402
from scripts.docgen.models import model_reference  # noqa: E402

# The parts whose every field must carry Field(description=...): a field without one fails
# the build, naming it. The run folder's models still show a field's comment in its place.
DESCRIBED_PARTS: set[str] = {"registration"}
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


# --- the parts, and the hook that puts them into pages ---------------------------------


def commands() -> str:
    from harness.cli import build_parser

    return command_reference(build_parser(), heading="###")


def registration() -> str:
    from harness.prereg.schema import Study

    return model_reference({"": [Study]}, require_descriptions="registration" in DESCRIBED_PARTS)


def run_folder() -> str:
    from harness.records import (
        GpuSample,
        MetricSample,
        RequestRecord,
        SmokeArmCheck,
        SmokeIdentityCheck,
    )
    from harness.rundir import CellFile, CompleteFile, ScoreRecord
    from harness.rundir.manifest import Manifest
    from harness.rundir.regime import BaselineRegime
    from harness.rundir.verdict import Verdict

    return model_reference(
        {
            "manifest.json": [Manifest],
            "verdict.json": [Verdict],
            "cells/<cell>/cell.json": [CellFile],
            "cells/<cell>/complete.json": [CompleteFile],
            "cells/<cell>/requests.jsonl (a line)": [RequestRecord],
            "cells/<cell>/metrics.jsonl (a line)": [MetricSample],
            "cells/<cell>/gpu.jsonl (a line)": [GpuSample],
            "cells/<cell>/scores.jsonl (a line)": [ScoreRecord],
            "smoke/arms.jsonl (a line)": [SmokeArmCheck, SmokeIdentityCheck],
            "smoke/regime.jsonl (a line)": [BaselineRegime],
        },
        heading="###",
        require_descriptions="run-folder" in DESCRIBED_PARTS,
    )


PARTS: dict[str, Callable[[], str]] = {
    "commands": commands,
    "registration": registration,
    "run-folder": run_folder,
}


def expand(markdown: str, where: str = "page") -> str:
    """The page with each `<!-- generated: NAME -->` line replaced by its part."""

    def part(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in PARTS:
            raise DocsError(
                f"{where}: unknown generated part {name!r} (known: " + ", ".join(PARTS) + ")"
            )
        return PARTS[name]()

    return MARKER.sub(part, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """mkdocs hook: a page's generated parts, filled in before it is rendered."""
    try:
        return expand(markdown, f"docs/{page.file.src_uri}")
    except DocsError as err:
        from mkdocs.exceptions import PluginError

        raise PluginError(str(err)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print one generated part of the docs")
    parser.add_argument("part", choices=sorted(PARTS))
    print(PARTS[parser.parse_args(argv).part]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
