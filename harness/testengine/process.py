"""The scripted engine in a process of its own, with its truth log, for fidelity checks.

In another process it competes with the client for CPUs as a real engine does, but not
for the client's interpreter: what the client gets wrong is the client's own doing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from harness.testengine.spec import ScriptedEngineSpec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ScriptedEngineProcess:
    """`with ScriptedEngineProcess(spec, workdir) as engine:` serves at engine.base_url."""

    def __init__(
        self, spec: ScriptedEngineSpec, workdir: Path, ready_timeout_s: float = 20
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.truth_path = workdir / "truth.jsonl"
        spec_path = workdir / "spec.json"
        spec_path.write_text(spec.model_dump_json())
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.testengine",
                "--spec",
                str(spec_path),
                "--port",
                str(self.port),
                "--truth-log",
                str(self.truth_path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(self.base_url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        err = self.proc.stderr.read().decode(errors="replace")[-400:] if self.proc.stderr else ""
        raise RuntimeError(f"scripted engine did not become ready on port {self.port}: {err}")

    def __enter__(self) -> ScriptedEngineProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def truth(self) -> tuple[dict[str, dict], dict[str, list[dict]]]:
        """The truth log so far: requests by response id, and their chunks in order."""
        requests: dict[str, dict] = {}
        chunks: dict[str, list[dict]] = {}
        if not self.truth_path.exists():
            return requests, chunks
        for line in self.truth_path.read_text().splitlines():
            row = json.loads(line)
            if row["kind"] == "request":
                requests[row["rid"]] = row
            else:
                chunks.setdefault(row["rid"], []).append(row)
        for rows in chunks.values():
            rows.sort(key=lambda c: c["i"])
        return requests, chunks
