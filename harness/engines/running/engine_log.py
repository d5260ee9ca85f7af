"""An engine's log and environment as the harness reports them: the lines that say what
the engine did last (for an error, the smoke and the verdict page) and the environment
with secrets hidden (for the manifest). Pure functions over text."""

from __future__ import annotations

import re

# How much of a failed engine's log an error shows.
LOG_TAIL_LINES = 40

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY|CREDENTIAL", re.IGNORECASE)


def redact_secrets(env: dict[str, str]) -> dict[str, str]:
    """The environment as the manifest records it: secret-looking values hidden."""
    return {k: ("<redacted>" if _SECRET_NAME.search(k) else v) for k, v in env.items()}


_ERROR_LINE = re.compile(r"\b\w*(Error|Exception)\b")


def engine_error_line(lines: list[str]) -> str | None:
    """The engine's own last error line in a log tail (with pydantic's `[type=...]`
    detail when there is one), or None."""
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if _ERROR_LINE.search(line) and not line.startswith(("File ", "Traceback")):
            detail = next((x.strip() for x in lines[i + 1 :] if "[type=" in x), None)
            if detail and len(detail) > 240:
                detail = "..." + detail[-240:]  # keep the end: [type=..., input_value=...]
            return line + (f" | {detail}" if detail else "")
    return None


_LEVEL_LINE = re.compile(r"\b(WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
_ACCESS_LINE = re.compile(r'"(GET|POST|PUT|DELETE|HEAD|OPTIONS) /')


def relevant_log_line(lines: list[str]) -> str | None:
    """The line of a log tail that best says what the engine did last: its own last
    error line, else its last warning, else its last line that is not an HTTP access
    line (those only say a request came); None for an empty log."""
    error = engine_error_line(lines)
    if error:
        return error
    kept = [line.strip() for line in lines if line.strip()]
    for line in reversed(kept):
        if _LEVEL_LINE.search(line):
            return line
    for line in reversed(kept):
        if not _ACCESS_LINE.search(line):
            return line
    return None


__all__ = ["LOG_TAIL_LINES", "engine_error_line", "redact_secrets", "relevant_log_line"]
