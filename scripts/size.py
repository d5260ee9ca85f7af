"""harness/'s size, per package: physical lines (what `wc -l` counts, issue 49's measure)
and code lines (without blank lines, comments and docstrings).

    .venv/bin/python scripts/size.py [folder]
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def counts(path: Path) -> tuple[int, int]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    docs = docstring_lines(ast.parse(text))
    code = sum(
        1
        for i, line in enumerate(lines, 1)
        if line.strip() and not line.strip().startswith("#") and i not in docs
    )
    return len(lines), code


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: scripts/size.py [folder]", file=sys.stderr)
        return 2
    folder = ROOT / (argv[0] if argv else "harness")
    if not folder.is_dir():
        print(f"size.py: {folder}: not a folder", file=sys.stderr)
        return 2
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder)
        package = rel.parts[0] if len(rel.parts) > 1 else "(top level)"
        physical, code = counts(path)
        per[package][0] += 1
        per[package][1] += physical
        per[package][2] += code
    print(f"{'package':<16}{'modules':>8}{'lines':>9}{'code':>9}")
    for package, (modules, physical, code) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{package:<16}{modules:>8}{physical:>9,}{code:>9,}")
    total = [sum(v[i] for v in per.values()) for i in range(3)]
    print(f"{'total':<16}{total[0]:>8}{total[1]:>9,}{total[2]:>9,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
