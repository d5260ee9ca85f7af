"""The full package list of an engine's environment, as its own interpreter sees it.

Read with importlib.metadata inside that interpreter (a uv-made venv has no pip), so
the manifest records exactly what the engine ran with, whatever installed it.
"""

from __future__ import annotations

import json
import subprocess

_LIST = (
    "import importlib.metadata as m, json, sys\n"
    "seen = {}\n"
    "for d in m.distributions():\n"
    "    name = d.metadata['Name']\n"
    "    if name and name.lower() not in seen:\n"
    "        seen[name.lower()] = {'name': name, 'version': d.version}\n"
    "print(json.dumps({'python_version': sys.version.split()[0],\n"
    "                  'packages': sorted(seen.values(), key=lambda p: p['name'].lower())}))\n"
)


def package_list(python: str, timeout_s: float = 120) -> dict:
    """{"python", "python_version", "packages": [{"name", "version"}, ...]}, or
    {"python", "error"} when the interpreter cannot say."""
    try:
        out = subprocess.run(
            [python, "-I", "-c", _LIST],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"python": python, "error": str(err)}
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"python": python, "error": f"exited {out.returncode}: {tail[0]}"}
    try:
        return {"python": python, **json.loads(out.stdout.strip().splitlines()[-1])}
    except (ValueError, IndexError):
        return {"python": python, "error": "no package list in its output"}


def package_changes(before: list[dict], after: list[dict]) -> list[str]:
    """'name: a -> b' for every package added, removed or at another version."""
    old = {p["name"].lower(): p for p in before}
    new = {p["name"].lower(): p for p in after}
    out = []
    for key in sorted(set(old) | set(new)):
        a = old.get(key, {}).get("version", "(absent)")
        b = new.get(key, {}).get("version", "(absent)")
        if a != b:
            out.append(f"{(new.get(key) or old[key])['name']}: {a} -> {b}")
    return out
