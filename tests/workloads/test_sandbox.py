"""Hostile HumanEval completions are contained: scored as failed, the harness unharmed.

Each hostile completion runs through the real scorer (score_item) in every
isolation this machine offers:
  ns+hook  namespaces + own uid + rlimits + audit hook (the default as root)
  ns       the same without the audit hook: the kernel layer alone must hold
  hook     the fallback: rlimits + audit hook only (here still as root, so the
           hook is really the only barrier)
On a machine without namespaces only the hook mode exists; as root on Linux
(CI) all three run, and a test insists that namespaces are available there.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from harness.workloads import load_items, score_item
from harness.workloads.sandbox import (
    UID_BASE,
    SandboxError,
    SandboxLimits,
    namespaces_available,
    run_programs,
    sandbox_uids,
)

NS_OK, NS_WHY = namespaces_available()
MODES = {"hook": SandboxLimits(isolation="hook")}
if NS_OK:
    MODES = {
        "ns+hook": SandboxLimits(isolation="namespaces"),
        "ns": SandboxLimits(isolation="namespaces", audit_hook=False),
        **MODES,
    }


@pytest.fixture(scope="module")
def item():
    return next(it for it in load_items("humaneval") if it.id == "humaneval:HumanEval/0")


def _correct_function(item) -> str:
    return item.reference["prompt"] + item.reference["canonical_solution"]


def test_root_on_linux_gets_namespaces():
    if sys.platform.startswith("linux") and os.geteuid() == 0:
        assert NS_OK, f"namespaces should work as root here: {NS_WHY}"
    else:
        assert not NS_OK


def test_default_limits():
    lim = SandboxLimits()
    assert lim.timeout_s == 3.0 and lim.audit_hook and lim.isolation == "auto"


def test_the_hook_mode_never_runs_without_its_hook():
    with pytest.raises(SandboxError, match="needs namespace isolation"):
        run_programs(["pass\n"], SandboxLimits(isolation="hook", audit_hook=False))


def test_correct_completion_passes_in_every_mode(item):
    for name, limits in MODES.items():
        s = score_item(
            "humaneval", item, "```python\n" + _correct_function(item) + "```", limits=limits
        )
        assert s.correct, (name, s.detail)
        tag = "namespaces(" if name.startswith("ns") else "rlimits+audit-hook, no namespaces"
        assert f"[sandbox: {tag}" in s.detail


@pytest.fixture
def victims(tmp_path):
    """Files the harness owns: one in a private dir, one world-writable (so that
    in namespace mode only the read-only mounts protect it)."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "victim.txt").write_text("keep")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    tmp_path.chmod(0o755)
    (shared / "victim.txt").write_text("keep")
    (shared / "victim.txt").chmod(0o666)
    return private / "victim.txt", shared / "victim.txt"


def _hostile(
    name: str, harness_pid: int, victims, port: int, escape: Path, unix_path: Path
) -> tuple[str, str]:
    """(code placed before the correct function, code placed after it)."""
    private, shared = victims
    return {
        "infinite loop": ("while True:\n    pass\n", ""),
        "fork loop": ("import os\nwhile True:\n    os.fork()\n", ""),
        "fork bomb that sleeps": (
            (
                "import os, time\nfor _ in range(10000):\n    try:\n        os.fork()\n"
                "    except OSError:\n        break\ntime.sleep(60)\n"
            ),
            "",
        ),
        "10 GB allocation": ("x = bytearray(10 * 1024 ** 3)\n", ""),
        "write a private file outside": (f"open({str(private)!r}, 'w').write('pwned')\n", ""),
        "write a world-writable file outside": (f"open({str(shared)!r}, 'w').write('pwned')\n", ""),
        "create a file in /tmp": (f"open({str(escape)!r}, 'w').write('x')\n", ""),
        "write next to the work dir": ("open('../escape.txt', 'w').write('x')\n", ""),
        "delete a file outside": (f"import os\nos.remove({str(shared)!r})\n", ""),
        "delete a tree outside": (f"import shutil\nshutil.rmtree({str(private.parent)!r})\n", ""),
        "network connection": (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n",
            "",
        ),
        "unix socket connection": (
            f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({str(unix_path)!r})\n",
            "",
        ),
        "kill the harness by pid": (
            f"import os, signal\nos.kill({harness_pid}, signal.SIGKILL)\n",
            "",
        ),
        "kill the parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", ""),
        "kill every process": ("import os, signal\nos.kill(-1, signal.SIGKILL)\n", ""),
        "kill the process group": ("import os, signal\nos.killpg(0, signal.SIGKILL)\n", ""),
        "kill the harness found in /proc": (
            (
                "import os, signal\nfor p in os.listdir('/proc'):\n    if not p.isdigit():\n"
                "        continue\n    try:\n        cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n"
                "    except OSError:\n        continue\n"
                "    if b'pytest' in cmd or b'harness.commands.score' in cmd:\n"
                "        os.kill(int(p), signal.SIGKILL)\n"
                "raise SystemExit('no harness found to kill')\n"
            ),
            "",
        ),
        "huge file": ("open('big', 'wb').write(b'x' * (100 * 2 ** 20))\n", ""),
        "flood the output": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", ""),
        "sys.exit(0) before the tests": ("", "import sys\nsys.exit(0)\n"),
        "os._exit(0) before the tests": ("", "import os\nos._exit(0)\n"),
    }[name]


HOSTILE = [
    "infinite loop",
    "fork loop",
    "fork bomb that sleeps",
    "10 GB allocation",
    "write a private file outside",
    "write a world-writable file outside",
    "create a file in /tmp",
    "write next to the work dir",
    "delete a file outside",
    "delete a tree outside",
    "network connection",
    "unix socket connection",
    "kill the harness by pid",
    "kill the parent",
    "kill every process",
    "kill the process group",
    "kill the harness found in /proc",
    "huge file",
    "flood the output",
    "sys.exit(0) before the tests",
    "os._exit(0) before the tests",
]
SLOW = {"infinite loop", "fork bomb that sleeps", "flood the output"}


def _sandbox_processes() -> list[psutil.Process]:
    """Processes of this test process's sandboxes (other test runs may share the machine)."""
    mine = sandbox_uids()
    found = [
        c
        for c in psutil.Process().children(recursive=True)
        if "_sandbox_launcher" in " ".join(_cmdline(c))
    ]
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] and p.info["uids"].real in mine:
                found.append(p)
        except (psutil.Error, AttributeError):
            continue
    return found


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


@pytest.fixture(autouse=True)
def sandbox_tmp(monkeypatch):
    """A temp dir of this test's own (reachable by the sandbox uid) for the sandbox dirs."""
    root = Path(tempfile.mkdtemp(prefix="specbench-test-", dir="/tmp"))
    root.chmod(0o755)
    monkeypatch.setenv("SPECBENCH_SANDBOX_TMP", str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_completion_is_contained(case, mode, item, victims, sandbox_tmp):
    # The default 3 s limit in the default mode; 1.5 s elsewhere to keep the suite short.
    limits = MODES[mode]
    if case in SLOW and mode != "ns+hook":
        limits = SandboxLimits(**{**limits.__dict__, "timeout_s": 1.5})
    escape = Path("/tmp") / f"specbench-escape-{uuid.uuid4().hex}"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    # A Unix socket anyone may connect to (mode 0777 in a 0777 directory).
    unix_dir = Path(tempfile.mkdtemp(prefix="specbench-unix-", dir="/tmp"))
    unix_dir.chmod(0o777)
    unix_path = unix_dir / "harness.sock"
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(str(unix_path))
    unix_path.chmod(0o777)
    unix_listener.listen(1)
    unix_listener.setblocking(False)
    before, after = _hostile(
        case, os.getpid(), victims, listener.getsockname()[1], escape, unix_path
    )
    response = "```python\n" + before + _correct_function(item) + after + "```"
    try:
        t0 = time.monotonic()
        score = score_item("humaneval", item, response, limits=limits)
        wall = time.monotonic() - t0
        # Scored as failed, and said why.
        assert not score.correct, score.detail
        assert "[sandbox: " in score.detail
        if case in SLOW:
            assert score.detail.startswith(f"timed out after {limits.timeout_s:g} s")
            # Killed at the limit (generous slack for a loaded 2-core machine).
            assert wall < limits.timeout_s + 10
        # The harness is unharmed: its files, its network, its processes, its disk.
        private, shared = victims
        assert private.read_text() == "keep" and shared.read_text() == "keep"
        assert stat.S_IMODE(shared.stat().st_mode) == 0o666
        assert not escape.exists()
        with pytest.raises(BlockingIOError):
            listener.accept()
        with pytest.raises(BlockingIOError):
            unix_listener.accept()
        assert not _sandbox_processes(), "sandbox processes left running"
        assert not list(sandbox_tmp.glob("specbench-sbx-*")), "sandbox directory left behind"
        # ... and it still works.
        ok = score_item("humaneval", item, _correct_function(item), limits=limits)
        assert ok.correct, ok.detail
    finally:
        listener.close()
        unix_listener.close()
        shutil.rmtree(unix_dir, ignore_errors=True)
        if escape.exists():
            escape.unlink()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_daemonised_child_does_not_outlive_its_program(mode, item):
    code = (
        "import os, time\ntry:\n    if os.fork() == 0:\n        os.setsid()\n"
        "        time.sleep(60)\n        os._exit(0)\nexcept PermissionError:\n    pass\n"
    )
    s = score_item("humaneval", item, code + _correct_function(item), limits=MODES[mode])
    # Whether or not the fork was allowed, the program itself passes its tests ...
    assert s.correct, s.detail
    # ... and nothing it started is left running.
    assert not _sandbox_processes()


@pytest.mark.timing
def test_programs_run_in_parallel_up_to_the_bound():
    sources = ["import time\ntime.sleep(1.0)\n"] * 6
    results = run_programs(sources, parallel=2)
    assert all(r.passed for r in results)
    spans = [(r.t_launch, r.t_end) for r in results]
    most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert most == 2


@pytest.mark.timing
def test_a_hostile_neighbour_does_not_disturb_a_correct_program(item):
    bomb = (
        "import os, time\nfor _ in range(10000):\n    try:\n        os.fork()\n"
        "    except OSError:\n        break\ntime.sleep(60)\n"
    )
    programs = [
        bomb,
        "import time\ntime.sleep(0.3)\n"
        + _correct_function(item)
        + "\n"
        + item.reference["test"]
        + "\ncheck(has_close_elements)\n",
    ]
    # Without the hook where namespaces exist, so the kernel limits are what is shown.
    # 5 s: the correct program needs ~0.5 s, with margin for a machine whose other core
    # is busy while the bomb forks next to it.
    limits = SandboxLimits(timeout_s=5.0, audit_hook=not NS_OK)
    bad, good = run_programs(programs, limits, parallel=2)
    assert bad.status == "timeout"
    assert good.passed, good.detail


def test_who_the_program_runs_as():
    r = run_programs(["import os\nprint(os.getuid(), os.getpid(), os.getppid())\n"])[0]
    uid, pid, ppid = map(int, r.output_tail.split())
    if NS_OK:
        assert uid >= UID_BASE and uid != os.getuid()
        assert (pid, ppid) == (2, 1)  # PID 2 under a reaper of its own, in its own PID namespace
    else:
        assert uid == os.getuid() and ppid == os.getpid()  # hook mode: a plain child
