"""An arm's engine invocation as one shell line a user can paste (`serve --print-command`).

The line is the command `start_engine` would spawn and the variables the harness adds
to its own environment for it (the rest is inherited), shell-quoted. A `${VAR}` that is
not set on this machine stays in the line, inside double quotes, so it expands once the
user exports it; notes above the line (shell comments) say what is missing here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.engines import get_engine_kind
from harness.engines.probe.preflight import launcher_problem

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class Invocation:
    """What would run for one arm: variables added, argv, and notes for the reader."""

    arm: str
    env: dict[str, str]
    argv: list[str]
    notes: list[str] = field(default_factory=list)
    unset: set[str] = field(default_factory=set)

    def line(self) -> str:
        words = [f"{k}={quote(v, self.unset)}" for k, v in self.env.items()]
        return " ".join(words + [quote(a, self.unset) for a in self.argv])


def invocation(arm: Arm, study: Study, port: int, unset: list[str] | set[str]) -> Invocation:
    """The invocation of an expanded launch arm; `unset` names the variables left as written."""
    kind = get_engine_kind(arm.engine)
    launch = arm.launch
    if launch is None:
        raise ValueError(f"arm {arm.name!r} attaches to an endpoint: specbench starts no engine")
    argv = kind.command(arm, study, launch.host, port)
    env = kind.environment(arm)
    text = " ".join([*argv, *env.values()])
    used = {name for name in _VARIABLE.findall(text) if name in set(unset)}
    notes = [
        f"{key.replace('_', ' ')}: {value}"
        for key, value in kind.resolved_settings(arm, study).items()
    ]
    notes += [
        f"{name} is not set here: export it (a path on the engine's machine) before pasting"
        for name in sorted(used)
    ]
    if not any(f"${{{name}}}" in (launch.python or "") for name in used):
        problem = launcher_problem(arm, kind)
        if problem:
            notes.append(f"{problem}: the line is printed anyway")
    return Invocation(arm.name, env, argv, notes, used)


def quote(word: str, unset: set[str]) -> str:
    """shlex.quote, except that `${VAR}` of an unset VAR stays expandable (double quotes)."""
    names = {m.group(1) for m in _VARIABLE.finditer(word)} & unset
    if not names:
        return shlex.quote(word)
    out, last = [], 0
    for match in _VARIABLE.finditer(word):
        if match.group(1) not in names:
            continue
        out.append(_double_quoted(word[last : match.start()]) + match.group(0))
        last = match.end()
    out.append(_double_quoted(word[last:]))
    return '"' + "".join(out) + '"'


def _double_quoted(text: str) -> str:
    """Text made literal inside double quotes."""
    return re.sub(r'([\\"$`])', r"\\\1", text)
