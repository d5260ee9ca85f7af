"""The docs build's strictness (scripts/docs.sh, which scripts/test.sh runs, with
mkdocs.yml), on a copy of the site: a page left out of the nav and a broken link fail the
build, and the drafts in docs/_incoming/ are never part of it (so the real site's strict
build stays green while drafts exist)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_the_strict_build_refuses_a_stray_page_and_ignores_incoming_drafts(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("_incoming"))
    (docs / "_incoming").mkdir()
    (docs / "_incoming" / "i99.md").write_text(
        "# A draft\n\nPage: concepts/bars. [not yet](nowhere.md)\n", encoding="utf-8")
    (docs / "stray.md").write_text("# Stray\n", encoding="utf-8")  # in no nav
    with (docs / "index.md").open("a", encoding="utf-8") as page:
        page.write("\n[gone](concepts/gone.md)\n")
    # The site's own config, read as mkdocs reads it (its hooks by absolute path here).
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = yaml.load(text, Loader=yaml.SafeLoader)
    config["docs_dir"] = str(docs)
    config["hooks"] = [str(ROOT / hook) for hook in config["hooks"]]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")

    proc = subprocess.run(["bash", str(ROOT / "scripts" / "docs.sh"), str(tmp_path / "mkdocs.yml")],
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "WARNING -  Doc file 'index.md' contains a link 'concepts/gone.md'" in out, out
    assert re.search(r"WARNING -  The following pages exist .* not included in the \"nav\""
                     r" configuration:\s+- stray.md", out), out
    assert "_incoming" not in out and "nowhere.md" not in out, out
