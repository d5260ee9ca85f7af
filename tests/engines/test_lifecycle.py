"""Lifecycle against a fake `vllm serve` (tests/engines/fake_engine.py): readiness,
failures with the log tail and the command, process-group stop, ports, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from harness.engines.running.lifecycle import start_engine
from harness.engines.running.process import free_port, port_in_use
from harness.errors import SpecbenchError
from tests.tiny_study import tiny_study

FAKE = Path(__file__).with_name("fake_engine.py")
ROOT = Path(__file__).resolve().parents[2]


def fake_arm(name: str = "fake", *, mode: str = "ok", pids: Path | None = None, **launch) -> dict:
    env = {"FAKE_ENGINE_MODE": mode}
    if pids is not None:
        env["FAKE_ENGINE_PIDS"] = str(pids)
    return {
        "name": name,
        "engine": "vllm",
        "launch": {
            "command": [sys.executable, str(FAKE)],
            "env": env,
            "startup_timeout_s": 20,
            "stop_grace_s": 5,
            **launch,
        },
    }


def read_pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def assert_all_gone(pids: list[int]) -> None:
    assert pids, "the fake engine wrote no pids"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        if not alive:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes still alive: {alive}")


def test_start_records_and_stop_takes_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    study = tiny_study(tmp_path, [fake_arm(pids=pids)])
    with start_engine(study.arms[0], study, tmp_path / "logs") as engine:
        info = engine.info
        assert engine.alive() and info.launched and info.pid == engine.pid
        assert info.command[:3] == [sys.executable, str(FAKE), "serve"]
        assert "--served-model-name" in info.command and "tiny" in info.command
        assert info.env_overrides == {"FAKE_ENGINE_MODE": "ok", "FAKE_ENGINE_PIDS": str(pids)}
        assert info.version == "0.32.0"  # from `<command> --version`
        assert info.started_wall <= time.time() and info.ready_after_s is not None
        assert engine.metrics_url == engine.base_url + "/metrics"
        assert engine.request_fields["stream_options"]["continuous_usage_stats"] is True
        recorded = json.loads((tmp_path / "logs" / "engine-fake.json").read_text())
        assert recorded["command"] == info.command
        assert "fake engine ready" in (tmp_path / "logs" / "engine-fake.log").read_text()
        port = int(engine.base_url.rsplit(":", 1)[1])
        assert len(read_pids(pids)) == 2  # the engine and its child
    assert not engine.alive()
    assert_all_gone(read_pids(pids))
    assert not port_in_use("127.0.0.1", port)
    engine.stop()  # idempotent


def test_start_records_the_resolved_settings(tmp_path: Path) -> None:
    """The manifest's engine entry (EngineInfo, also engine-<arm>.json) keeps what the
    arm resolves to: here an EAGLE-3 head registered at fp8."""
    head = {
        **fake_arm("head"),
        "baseline": "fake",
        "drafter": {
            "method": "eagle3",
            "model": "org/head",
            "num_draft_tokens": 3,
            "quantization": "fp8",
        },
    }
    study = tiny_study(tmp_path, [fake_arm(), head])
    with start_engine(study.arm("head"), study, tmp_path / "logs") as engine:
        # ...and what the engine chose by itself, read from its log once it was ready:
        # this fake logs no line that turns async scheduling off.
        assert engine.info.settings == {
            "drafter_precision": "fp8 (--speculative-config quantization)",
            "async_scheduling": "on (vLLM's default; no startup line turned it off)",
            "cascade_attention": "off (removed in vLLM 0.32: --[no-]disable-cascade-attn has"
            " no effect)",
        }
        assert '"quantization":"fp8"' in " ".join(engine.info.command)
        recorded = json.loads((tmp_path / "logs" / "engine-head.json").read_text())
        assert recorded["settings"] == engine.info.settings


def test_exit_during_start_shows_log_tail_and_command(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    study = tiny_study(tmp_path, [fake_arm(mode="exit", pids=pids)])
    with pytest.raises(SpecbenchError) as caught:
        start_engine(study.arms[0], study, tmp_path)
    text = str(caught.value)
    assert "exited with code 1" in text
    assert "ValueError: fake engine refuses this configuration" in text
    assert f"command: {sys.executable} {FAKE} serve" in text
    assert "last 40 lines of the log" in text
    assert_all_gone(read_pids(pids))


def test_timeout_names_the_phase_and_stops_the_engine(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    study = tiny_study(tmp_path, [fake_arm(mode="hang", pids=pids, startup_timeout_s=2)])
    with pytest.raises(SpecbenchError) as caught:
        start_engine(study.arms[0], study, tmp_path)
    assert "not ready after 2 s (waiting for the port to open)" in str(caught.value)
    assert_all_gone(read_pids(pids))


def test_wrong_served_model_fails(tmp_path: Path) -> None:
    study = tiny_study(tmp_path, [fake_arm(mode="wrong")])
    with pytest.raises(SpecbenchError, match="not the registered model 'tiny'"):
        start_engine(study.arms[0], study, tmp_path)


def test_speculation_series_must_match_the_arm(tmp_path: Path) -> None:
    # The fake exports spec counters only when given --speculative-config, so an arm
    # whose extra args sneak one in behaves unlike a no-drafter arm.
    arm = fake_arm(extra_args=["--speculative-config", "{}"])
    study = tiny_study(tmp_path, [arm])
    with pytest.raises(SpecbenchError, match="has no drafter but the engine exports"):
        start_engine(study.arms[0], study, tmp_path)


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        study = tiny_study(tmp_path, [fake_arm(port=port)])
        with pytest.raises(SpecbenchError, match=f"port {port} on 127.0.0.1 is already in use"):
            start_engine(study.arms[0], study, tmp_path)
    assert not (tmp_path / "engine-fake.log").exists()  # nothing was started


def test_unset_variable_in_arm_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECBENCH_NO_SUCH_PYTHON", raising=False)
    arm = {"name": "x", "engine": "vllm", "launch": {"python": "${SPECBENCH_NO_SUCH_PYTHON}"}}
    study = tiny_study(tmp_path, [arm])
    with pytest.raises(SpecbenchError, match="not set: SPECBENCH_NO_SUCH_PYTHON"):
        start_engine(study.arms[0], study, tmp_path)


def test_keyboard_interrupt_while_starting_stops_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    study = tiny_study(tmp_path, [fake_arm(mode="hang", pids=pids, startup_timeout_s=60)])
    from harness.engines.running import lifecycle

    calls = {"n": 0}
    real_sleep = time.sleep

    def interrupting_sleep(s: float) -> None:  # Ctrl-C arrives while polling readiness
        calls["n"] += 1
        if calls["n"] > 4:
            raise KeyboardInterrupt
        real_sleep(s)

    monkeypatch.setattr(lifecycle.time, "sleep", interrupting_sleep)
    with pytest.raises(KeyboardInterrupt):
        start_engine(study.arms[0], study, tmp_path)
    monkeypatch.undo()
    assert_all_gone(read_pids(pids))


def _write_prereg(tmp_path: Path, arm: dict) -> Path:
    study = tiny_study(tmp_path, [arm])
    path = tmp_path / "prereg.yaml"
    path.write_text(yaml.safe_dump(study.model_dump(mode="json", by_alias=True, exclude_none=True)))
    return path


def _serve(prereg: Path, arm: str, tmp_path: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "serve",
            arm,
            "--prereg",
            str(prereg),
            "--log-dir",
            str(tmp_path / "serve-logs"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )


def test_serve_command_runs_until_ctrl_c(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    port = free_port()
    prereg = _write_prereg(tmp_path, fake_arm(pids=pids, port=port))
    proc = _serve(prereg, "fake", tmp_path, {})
    lines = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        lines.append(line)
        if "press Ctrl-C" in line or not line:
            break
    text = "".join(lines)
    assert f"serving at http://127.0.0.1:{port}" in text, text
    assert port_in_use("127.0.0.1", port)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, text + out
    assert "stopped: the port is free and no engine process is left" in out
    assert not port_in_use("127.0.0.1", port)
    assert_all_gone(read_pids(pids))


def test_serve_command_interrupted_while_starting(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    prereg = _write_prereg(tmp_path, fake_arm(mode="hang", pids=pids, startup_timeout_s=120))
    proc = _serve(prereg, "fake", tmp_path, {})
    deadline = time.monotonic() + 30
    while len(read_pids(pids)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "interrupted while starting" in out
    assert_all_gone(read_pids(pids))


def test_serve_command_unknown_arm_is_an_input_error(tmp_path: Path) -> None:
    prereg = _write_prereg(tmp_path, fake_arm())
    proc = _serve(prereg, "nope", tmp_path, {})
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "no arm named 'nope' (arms: fake)" in out


HARNESS_SCRIPT = """
import sys, time
sys.path.insert(0, {root!r})
from tests.tiny_study import tiny_study
from harness.engines.running.lifecycle import start_engine
study = tiny_study({tmp!r}, [{arm!r}])
engine = start_engine(study.arms[0], study, {tmp!r})
print("ready", flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_harness_interrupted_stops_a_running_engine(tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C (or SIGTERM) to a harness holding a running engine takes the engine down."""
    pids = tmp_path / "pids"
    arm = fake_arm(pids=pids, startup_timeout_s=120)
    script = HARNESS_SCRIPT.format(root=str(ROOT), tmp=str(tmp_path), arm=arm)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.strip() == "ready", first + proc.stdout.read()
    assert len(read_pids(pids)) == 2
    proc.send_signal(sig)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert_all_gone(read_pids(pids))


def test_attach_neither_starts_nor_stops(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    owner = tiny_study(tmp_path, [fake_arm(pids=pids)])
    with start_engine(owner.arms[0], owner, tmp_path / "logs") as server:
        attach = {"base_url": server.base_url, "metrics": "vllm", "served_model": "tiny"}
        study = tiny_study(tmp_path, [{"name": "remote", "engine": "vllm", "attach": attach}])
        remote = start_engine(study.arms[0], study, tmp_path / "remote-logs")
        info = remote.info
        assert not info.launched and info.pid is None and info.log_path is None
        assert info.command == [] and info.version == "0.32.0"  # from the server's /version
        assert remote.base_url == server.base_url and remote.metrics_dialect == "vllm"
        assert remote.request_fields["stream_options"]["continuous_usage_stats"] is True
        assert remote.alive()
        remote.stop()
        assert server.alive()  # stopping an attached arm leaves the server alone
        assert not (tmp_path / "remote-logs").exists()
        wrong = tiny_study(
            tmp_path,
            [{"name": "remote", "engine": "vllm", "attach": {**attach, "served_model": "other"}}],
        )
        with pytest.raises(SpecbenchError, match="serves \\['tiny'\\], not 'other'"):
            start_engine(wrong.arms[0], wrong, tmp_path)
    assert not remote.alive()  # the server is gone now


def test_secrets_in_the_arm_environment_are_not_recorded(tmp_path: Path) -> None:
    arm = fake_arm()
    arm["launch"]["env"]["HF_TOKEN"] = "hf_secret"
    study = tiny_study(tmp_path, [arm])
    with start_engine(study.arms[0], study, tmp_path) as engine:
        assert engine.info.env_overrides["HF_TOKEN"] == "<redacted>"
        assert "hf_secret" not in (tmp_path / "engine-fake.json").read_text()
