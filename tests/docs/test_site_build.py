"""The docs build's strictness (scripts/docs.sh, which scripts/test.sh runs, with
mkdocs.yml), on a copy of the site: a page left out of the nav, a broken link and a
registration field without a description fail the build, and the drafts in docs/_incoming/
are never part of it (so the real site's strict build stays green while drafts exist)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def site_copy(tmp_path: Path, hooks_first: Sequence[Path] = ()) -> tuple[Path, Path]:
    """A copy of docs/ and of mkdocs.yml pointing at it (its hooks by absolute path, after
    `hooks_first`): (the docs folder, the config)."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("_incoming"))
    # The site's own config, read as mkdocs reads it (its hooks by absolute path here).
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = yaml.load(text, Loader=yaml.SafeLoader)
    config["docs_dir"] = str(docs)
    config["hooks"] = [str(h) for h in hooks_first] + [str(ROOT / h) for h in config["hooks"]]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return docs, tmp_path / "mkdocs.yml"


def build(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "docs.sh"), str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_strict_build_refuses_a_stray_page_and_ignores_incoming_drafts(tmp_path: Path) -> None:
    docs, config = site_copy(tmp_path)
    (docs / "_incoming").mkdir()
    (docs / "_incoming" / "i99.md").write_text(
        "# A draft\n\nPage: concepts/bars. [not yet](nowhere.md)\n", encoding="utf-8"
    )
    (docs / "stray.md").write_text("# Stray\n", encoding="utf-8")  # in no nav
    with (docs / "index.md").open("a", encoding="utf-8") as page:
        page.write("\n[gone](concepts/gone.md)\n")

    proc = build(config)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "WARNING -  Doc file 'index.md' contains a link 'concepts/gone.md'" in out, out
    assert re.search(
        r"WARNING -  The following pages exist .* not included in the \"nav\""
        r" configuration:\s+- stray.md",
        out,
    ), out
    assert "_incoming" not in out and "nowhere.md" not in out, out


# A hook run before the site's own: the registration gains a field with a comment beside it
# and no Field(description=...), two models below the top (Study -> recording -> regime).
UNDESCRIBED_FIELD_HOOK = """
from pydantic import Field

from harness.prereg import schema


class LooseRegime(schema.RegimeCheck):
    max_skew: float = 1.0  # a comment beside it is not a description


class LooseRecording(schema.Recording):
    regime: LooseRegime = Field(default_factory=LooseRegime, description="the regime check")


class LooseStudy(schema.Study):
    recording: LooseRecording = Field(default_factory=LooseRecording, description="recording")


schema.Study = LooseStudy
"""


def test_the_strict_build_refuses_a_registration_field_without_a_description(tmp_path) -> None:
    hook = tmp_path / "undescribed_field.py"
    hook.write_text(UNDESCRIBED_FIELD_HOOK, encoding="utf-8")
    _, config = site_copy(tmp_path, hooks_first=[hook])
    proc = build(config)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "1 fields have no Field(description=...): LooseRegime.max_skew" in out, out

    # The same site without that hook builds: the real registration is described throughout.
    _, config = site_copy(tmp_path / "as-is")
    proc = build(config)
    assert proc.returncode == 0, proc.stdout + proc.stderr
