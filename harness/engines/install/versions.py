"""An engine's version, asked of its environment by the kind's version command
(pre-flight asks before the hours; a start records it)."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

from harness.engines.launch.base import parse_version_output

if TYPE_CHECKING:
    from harness.engines.launch.base import EngineKind
    from harness.prereg.schema import Arm


def probe_version(kind: EngineKind, arm: Arm, timeout_s: float = 300) -> tuple[str | None, str]:
    """(version, output) from the kind's version command; version None on failure."""
    try:
        cmd = kind.version_command(arm)
    except ValueError as err:
        return None, str(err)
    try:
        out = subprocess.run(
            cmd,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return None, f"{cmd[0]}: not found"
    except PermissionError:
        return None, f"{cmd[0]}: not executable"
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout_s:.0f} s"
    text = (out.stdout or "") + (out.stderr or "")
    if out.returncode != 0:
        return None, text
    return parse_version_output(out.stdout or ""), text


__all__ = ["probe_version"]
