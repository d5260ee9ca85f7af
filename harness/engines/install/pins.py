"""The engine environments' pins (engines.lock.toml) and the interpreters they give.

Each entry names a package at one version, its venv under
$SPECBENCH_CACHE/engines/<name>-<version>/, and the variable the arms use for its
interpreter (`${SPECBENCH_VLLM_PYTHON}`): the variable wins when set, otherwise the
arms get the venv's python (`machine_environment`, used by the one expander).
"""

from __future__ import annotations

import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import InputError
from harness.paths import CACHE_DIR, PROJECT_ROOT

LOCK_FILE = PROJECT_ROOT / "engines.lock.toml"


class EnginePin(BaseModel):
    """One engine environment: what goes into it and where it lives."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    package: str
    version: Annotated[str, Field(pattern=r"^\d+(\.\d+)*([.+-]?\w+)*$")]  # an exact version
    module: str  # what `import` finds the engine as
    server_modules: list[str] = Field(default_factory=list)  # imported too by the check
    variable: Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$")]  # ${VAR} the arms use
    python: Annotated[str, Field(pattern=r"^3\.\d+$")]  # the venv's Python
    platform: str  # the wheel platform tag it must resolve for, e.g. manylinux_2_28_x86_64
    gpu: bool
    find_links: list[str] = Field(default_factory=list)  # searched when the folder exists
    remove_after: list[str] = Field(default_factory=list)  # uninstalled after the install
    # An environment only the test suite uses (no arm runs it): the package without its
    # dependencies (no_deps), these beside it, and empty modules standing in for ones it
    # imports and this environment never runs (harness/engines/install/install.py).
    test_only: bool = False
    no_deps: bool = False
    with_packages: list[str] = Field(default_factory=list)
    stand_ins: list[str] = Field(default_factory=list)

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    def venv(self, cache: Path | None = None) -> Path:
        return (cache or CACHE_DIR) / "engines" / f"{self.name}-{self.version}"

    def default_interpreter(self, cache: Path | None = None) -> Path:
        return self.venv(cache) / "bin" / "python"

    def installed(self, cache: Path | None = None) -> bool:
        venv = self.venv(cache)
        return (venv / ".complete").exists() and (venv / "bin" / "python").exists()


def load_pins(path: Path | None = None) -> dict[str, EnginePin]:
    """Every pin in the lock file, by name. Bad input: InputError naming file and field."""
    path = Path(path or LOCK_FILE)
    return dict(_load(path.resolve()))


@lru_cache(maxsize=8)
def _load(path: Path) -> tuple[tuple[str, EnginePin], ...]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{path}: cannot read the engine pins: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"{path}: not valid TOML: {err}") from None
    pins = []
    for name, table in data.items():
        if not isinstance(table, dict):
            raise InputError(f"{path}: {name}: expected a table [{name}] of one engine's pins")
        try:
            pins.append((name, EnginePin.model_validate({"name": name, **table})))
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise InputError(f"{path}: {name}.{field}: {first['msg']}") from None
    if not pins:
        raise InputError(f"{path}: expected at least one [engine] table")
    return tuple(pins)


def pin(name: str, path: Path | None = None) -> EnginePin:
    pins = load_pins(path)
    if name not in pins:
        raise InputError(
            f"{path or LOCK_FILE}: no engine named {name!r} (pinned: {', '.join(pins)})"
        )
    return pins[name]


def default_interpreters(path: Path | None = None) -> dict[str, str]:
    """variable -> the pinned venv's python, for every pin."""
    return {p.variable: str(p.default_interpreter()) for p in load_pins(path).values()}


def interpreter_for(name: str, environ: dict[str, str] | None = None) -> str:
    """The interpreter an arm naming this engine's variable gets: the variable's value
    when set, otherwise the pinned venv's python."""
    p = pin(name)
    env = os.environ if environ is None else environ
    return env.get(p.variable) or str(p.default_interpreter())


def machine_environment() -> dict[str, str]:
    """What `${VAR}` expands from on this machine: the environment, over the pinned
    interpreters' defaults (a variable set in the environment always wins)."""
    return {**default_interpreters(), **os.environ}


def pin_for_interpreter(python: str) -> EnginePin | None:
    """The pin whose venv this interpreter is, if any."""
    for p in load_pins().values():
        if Path(python) == p.default_interpreter():
            return p
    return None
