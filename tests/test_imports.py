"""Each command imports what it needs, no harness module imports itself back, and no two
harness modules define the same public name.

The import tests read the harness package's imports statically (ast), so they see every
import a command can reach, including those inside functions that a plain
`import harness.commands.report` does not run; the loaded-modules test then imports
them in a fresh interpreter and reads sys.modules, which also catches what a package's
__init__ or a registry pulls in at run time.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "harness"

# What `validate` and `report` must never load: the run stack (the runner, the smoke,
# the run folder's writer), the engine lifecycle (process start, readiness, signal
# handlers) and the measurement core (load driver, client transport, scraper).
FORBIDDEN = ("harness.run", "harness.engines.running.lifecycle", "harness.measure")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def harness_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(HARNESS.rglob("*.py"))}


def _target(name: str) -> str | None:
    """The harness module an imported name lives in (a module, else its package)."""
    mods = harness_modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


@cache
def import_edges() -> dict[str, dict[str, bool]]:
    """module -> {imported harness module: imported at module level}. An import in a
    function or method counts (at_module_level False); one under `if TYPE_CHECKING:`
    does not (it never runs)."""
    mods = harness_modules()
    edges: dict[str, dict[str, bool]] = {}
    for name, path in mods.items():
        out: dict[str, bool] = {}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]

        def add(target: str | None, top: bool, name: str = name, out: dict = out) -> None:
            if target and target != name:
                out[target] = out.get(target, False) or top

        def visit(node: ast.AST, top: bool, package: str = package) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    continue
                inner = top and not isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                )
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        add(_target(alias.name), top)
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        pkg = package
                        for _ in range(child.level - 1):
                            pkg = pkg.rpartition(".")[0]
                        base = f"{pkg}.{base}" if base else pkg
                    for alias in child.names:
                        full = f"{base}.{alias.name}"
                        add(full if full in mods else _target(base), top)
                visit(child, inner)

        visit(ast.parse(path.read_text(encoding="utf-8")), True)
        edges[name] = out
    return edges


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """One cycle (a path that returns to its start) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, []):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    out = []
    for comp in components:
        members, start = set(comp), comp[0]
        path, seen = [start], {start}
        # Walk inside the component until a step returns to a module already on the path.
        while True:
            nxt = next(w for w in graph[path[-1]] if w in members)
            if nxt in seen:
                out.append(path[path.index(nxt) :] + [nxt])
                break
            path.append(nxt)
            seen.add(nxt)
    return out


def test_no_import_cycle_among_harness_modules() -> None:
    """No harness module imports itself back, through any chain of imports.

    Imports inside functions count as edges, as module-level ones do. Moving an import
    into a function hides a cycle from the interpreter (it no longer fails at import
    time), not from a reader: the two modules still cannot be read, tested, changed or
    loaded apart, and which one a command needs depends on which functions it calls
    (finalize.py and report/build.py importing each other inside functions was such a
    cycle). A lazy import that keeps a command light is fine as long as it points one
    way. Imports under `if TYPE_CHECKING:` do not count: they never run and name types
    only."""
    graph = {m: sorted(targets) for m, targets in import_edges().items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles among harness modules:\n" + "\n".join(
        " -> ".join(c) for c in cycles
    )


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def reachable(start: str) -> set[str]:
    """Every harness module `start` can import, at module level or inside a function,
    with the packages each import runs the __init__ of."""
    edges = import_edges()
    seen, todo = {start}, [start]
    while todo:
        module = todo.pop()
        parts = module.split(".")
        nexts = set(edges.get(module, {})) | {".".join(parts[:i]) for i in range(1, len(parts))}
        for n in nexts - seen:
            seen.add(n)
            todo.append(n)
    return seen


def chain(start: str, goal: str) -> list[str]:
    """The shortest import chain from start to goal (for the failure message)."""
    edges = import_edges()
    prev: dict[str, str | None] = {start: None}
    todo = [start]
    while todo and goal not in prev:
        nxt = []
        for module in todo:
            parts = module.split(".")
            for n in sorted(
                set(edges.get(module, {})) | {".".join(parts[:i]) for i in range(1, len(parts))}
            ):
                if n not in prev:
                    prev[n] = module
                    nxt.append(n)
        todo = nxt
    out, at = [], goal if goal in prev else None
    while at is not None:
        out.append(at)
        at = prev[at]
    return out[::-1]


def loaded_by(modules: list[str]) -> list[str]:
    """The harness modules a fresh interpreter holds after importing `modules`."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] == 'harness')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "command, needs",
    [
        # validate reads the study, its arm files, the seal and the hub cache (drafter bases).
        ("harness.commands.validate", ["harness.prereg.drafter_base", "harness.weights.cache"]),
        # report reads the run folder and draws the PDF: analysis, finalize and the pages.
        (
            "harness.commands.report",
            [
                "harness.finalize",
                "harness.report.build",
                "harness.rundir",
                "harness.analysis.smoke",
            ],
        ),
    ],
)
def test_a_command_loads_neither_the_run_stack_nor_the_engine_lifecycle(command, needs) -> None:
    """`import harness.commands.X`, then every module its functions can import (what
    running the command may load), in a fresh interpreter: no module under harness.run,
    harness.engines.running.lifecycle or harness.measure is among them, by name."""
    statically = reachable(command)
    loaded = loaded_by(sorted(statically))
    plain = loaded_by([command])
    assert set(needs) <= set(loaded), "the test no longer imports what the command runs"
    bad = sorted(m for m in set(loaded) | statically | set(plain) if _forbidden(m))
    assert not bad, f"{command} loads {', '.join(bad)}:\n" + "\n".join(
        " <- ".join(reversed(chain(command, m))) for m in bad if m in statically
    )


def test_each_command_name_is_the_parser_its_module_registers() -> None:
    """The CLI imports a command's module by its name alone, so the name must be what the
    module registers; and the whole parser (help, the docs' reference) still has them all."""
    import argparse

    from harness.cli import COMMAND_MODULES, build_parser

    def names(parser: argparse.ArgumentParser) -> set[str]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return set(sub.choices)

    for name in COMMAND_MODULES:
        assert names(build_parser([name])) == {name}
    assert names(build_parser()) == set(COMMAND_MODULES)


def test_specbench_validate_loads_at_most_60_harness_modules() -> None:
    """`specbench validate prereg.yaml` through the CLI's own entry, in a fresh interpreter:
    only the chosen command's module is imported (it loaded about 146 while the CLI
    imported every command to build its parser)."""
    code = (
        "import json, sys\n"
        "from harness.cli import main\n"
        "rc = main(['validate', 'prereg.yaml'])\n"
        "mods = sorted(k for k in sys.modules if k.split('.')[0] == 'harness')\n"
        "print(json.dumps([rc, mods]), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    rc, mods = json.loads(done.stderr.strip().splitlines()[-1])
    assert rc == 0, done.stderr
    assert "harness.commands.validate" in mods and "harness.commands.run" not in mods
    assert len(mods) <= 60, f"validate loads {len(mods)} harness modules: {mods}"


# The commands' protocol (harness/commands/<name>.py each define register and run) and the
# `main` of a module run as a script are meant to repeat; nothing else public may.
PROTOCOL_NAMES = {"register": "harness.commands.", "run": "harness.commands.", "main": "harness."}


def public_definitions(tree: ast.Module) -> list[str]:
    """The public classes, functions, type aliases and constants (ALL_CAPS) a module defines
    at top level. An assignment defines; an import does not (a name imported from the one
    module that defines it is that one thing, read where it is used)."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_") and n != "__all__"]


def shared_names(modules: dict[str, Path]) -> dict[str, list[str]]:
    where: dict[str, list[str]] = {}
    for module, path in modules.items():
        for name in public_definitions(ast.parse(path.read_text())):
            if not module.startswith(PROTOCOL_NAMES.get(name, "\0")):
                where.setdefault(name, []).append(module)
    return {name: mods for name, mods in where.items() if len(mods) > 1}


def test_no_two_harness_modules_define_the_same_public_name() -> None:
    shared = shared_names(harness_modules())
    assert not shared, (
        "one name, two definitions (one thing: define it once and import it;"
        " two things: rename the one whose name says less): "
    ) + "; ".join(f"{name} in {', '.join(mods)}" for name, mods in sorted(shared.items()))


def test_the_same_name_check_sees_classes_functions_and_aliases(tmp_path) -> None:
    (tmp_path / "a.py").write_text(
        "class Gpu: ...\ndef locate(): ...\nStatus = int\nLIMIT = 1\n"
        "WIDTH = 3\nfrom harness.x.b import SHARED\n"
    )
    (tmp_path / "b.py").write_text(
        "Gpu = int\nasync def locate(): ...\nStatus: type = str\n"
        "LIMIT = 2\nWIDTH: int = 3\nSHARED = 4\ndef run(): ...\n"
        "_private = 1\n_CAPS = 1\n"
    )
    (tmp_path / "f.py").write_text("_private = 2\n_CAPS = 2\nimport SHARED\n")
    (tmp_path / "c.py").write_text("def run(): ...\n")
    modules = {
        "harness.x.a": tmp_path / "a.py",
        "harness.x.b": tmp_path / "b.py",
        "harness.commands.c": tmp_path / "c.py",
        "harness.commands.d": tmp_path / "c.py",
        "harness.x.f": tmp_path / "f.py",
    }
    assert shared_names(modules) == {
        "Gpu": ["harness.x.a", "harness.x.b"],
        "locate": ["harness.x.a", "harness.x.b"],
        "Status": ["harness.x.a", "harness.x.b"],
        "LIMIT": ["harness.x.a", "harness.x.b"],
        "WIDTH": ["harness.x.a", "harness.x.b"],
    }
    modules["harness.x.e"] = tmp_path / "c.py"  # two `run`s outside the commands clash
    assert shared_names(modules)["run"] == ["harness.x.b", "harness.x.e"]
