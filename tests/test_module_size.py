"""No harness module passes 500 lines (issue 49: modules of one job). A module that grows
past it is split by concept, as prereg/schema/ and analysis/rows.py were."""

from __future__ import annotations

from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"
MAX_LINES = 500


def module_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_harness_module_over_500_lines() -> None:
    modules = sorted(HARNESS.rglob("*.py"))
    assert len(modules) > 100, f"{HARNESS}: the harness's modules were not found"
    over = {
        str(p.relative_to(HARNESS.parent)): n for p in modules if (n := module_lines(p)) > MAX_LINES
    }
    assert not over, f"modules over {MAX_LINES} lines (split them by concept): {over}"


def test_the_count_is_physical_lines(tmp_path: Path) -> None:
    # Blank lines, comments and docstrings count: the limit is what a reader scrolls.
    module = tmp_path / "m.py"
    module.write_text('"""doc\n\nmore"""\n\n# why\nx = 1\n', encoding="utf-8")
    assert module_lines(module) == 6
