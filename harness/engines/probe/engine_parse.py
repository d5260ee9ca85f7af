"""Every engine command parsed by the engine that will run it, before any GPU time.

An arm's command (flags, speculative config, k schedule, synthetic acceptance) is read
by the engine's own parser and configuration checks in the engine's own interpreter
(harness/engines/probe/parse_probe.py says how far each goes without the model's files): a
flag or a value the pinned engine does not know fails here, not on the GPU day. vLLM's
commands parse in any vLLM 0.32 environment, the CPU build's included; SGLang's in the
test-only `sglang-args` environment (engines.lock.toml) where no GPU one is at hand.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.engines import get_engine_kind
from harness.engines.probe.parse_probe import PARSE_RESULT_MARKER
from harness.errors import SpecbenchError
from harness.prereg.schema import Arm, Study

PARSE_PROBE = Path(__file__).with_name("parse_probe.py")


@dataclass(frozen=True)
class Parsed:
    ok: bool
    problem: str | None
    checked: list[str]  # what of the engine ran on the command


def engine_command(arm: Arm, study: Study) -> tuple[str, list[str], dict[str, str]]:
    """(the engine that parses it: vllm or sglang, the arguments after the interpreter's
    module, the variables the arm's engine is started with)."""
    kind = get_engine_kind(arm.engine)
    argv = kind.command(arm, study, "127.0.0.1", 8000)
    return kind.metrics_dialect, argv[len(kind.prefix(arm)) :], kind.environment(arm)


def parse_commands(
    python: str, engine: str, commands: dict[str, tuple[list[str], dict]], timeout_s: float = 600
) -> dict[str, Parsed]:
    """Each named (argv, env) parsed by `engine` in `python`, one process for them all."""
    request = {
        "engine": engine,
        "commands": [{"name": n, "argv": a, "env": e} for n, (a, e) in commands.items()],
    }
    try:
        proc = subprocess.run(
            [python, str(PARSE_PROBE)],
            input=json.dumps(request),
            text=True,
            capture_output=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SpecbenchError(f"{python}: the {engine} parse probe did not run: {err}") from None
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(PARSE_RESULT_MARKER)), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SpecbenchError(
            f"{python}: the {engine} parse probe failed (exit {proc.returncode}): {tail[0]}"
        )
    return {name: Parsed(**r) for name, r in json.loads(line[len(PARSE_RESULT_MARKER) :]).items()}


def parse_arms(python: str, arms: list[Arm], study: Study) -> dict[str, Parsed]:
    """Each arm's command parsed by its engine in `python` (one engine's arms)."""
    commands = {a.name: engine_command(a, study) for a in arms}
    engines = {engine for engine, _, _ in commands.values()}
    if len(engines) != 1:
        raise ValueError(f"arms of one engine at a time, got {sorted(engines)}")
    return parse_commands(
        python, engines.pop(), {name: (argv, env) for name, (_, argv, env) in commands.items()}
    )
