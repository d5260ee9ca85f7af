"""`specbench serve ARM --prereg FILE --print-command`: the exact engine line of every
registered arm (prereg.yaml) and of the demo's (examples/cpu.yaml), printed without
starting anything, pasteable as printed."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.engines import get_engine_kind
from harness.engines.install import pins
from harness.engines.launch import cpu_dtype
from harness.engines.launch.base import expand_study, expand_study_leaving_unset
from harness.engines.launch.command_line import invocation, quote
from harness.engines.launch.cpu_dtype import AMX_FLAGS, AVX512_CORE_FLAGS, host_cpu_dtype
from harness.engines.launch.vllm_engine import VLLM_CPU_LAUNCHER
from harness.prereg import load_study
from tests.engines.registered_flags import SGLANG_TAIL, sglang_flags

ROOT = Path(__file__).resolve().parents[2]
PREREG = ROOT / "prereg.yaml"
CPU_DEMO = ROOT / "examples" / "cpu.yaml"
GPU_ENV = {
    "SPECBENCH_VLLM_PYTHON": "/envs/vllm/bin/python",
    "SPECBENCH_SGLANG_PYTHON": "/envs/sglang/bin/python",
}
CPU_ENV = {"SPECBENCH_TINY_PAIR": "/models/pair", "SPECBENCH_VLLM_CPU_PYTHON": "/venv/bin/python"}
CPU_VARS = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "auto",
    "HF_HUB_OFFLINE": "1",
}


def prereg_argv(python: str) -> dict[str, list[str]]:
    """Every flag of every registered arm, in order (the revisions are the study's own)."""
    study = load_study(PREREG)
    rev = study.model.revision
    eagle3, dflash = study.arm("vllm-eagle3").drafter, study.arm("sglang-dflash").drafter
    assert rev and eagle3 and eagle3.revision and dflash and dflash.revision  # all pinned
    vllm = [
        python % "vllm",
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        "Qwen/Qwen3-8B-FP8",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--served-model-name",
        "qwen3-8b-fp8",
        "--revision",
        rev,
        "--quantization",
        "fp8",
        "--max-model-len",
        "8192",
        "--seed",
        "0",
        "--max-num-seqs",
        "64",
    ]
    vllm_tail = ["--gpu-memory-utilization", "0.90", "--no-enable-prefix-caching"]
    per_request = ["--per-request-spec-decode-metrics", "summary"]
    sglang = [python % "sglang", "-m", "sglang.launch_server", *sglang_flags(8000)]
    eagle = {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "model": "RedHatAI/Qwen3-8B-speculator.eagle3",
        "revision": eagle3.revision,
    }
    ngram = {
        "method": "ngram_gpu",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    return {
        "vllm-base": [*vllm, *vllm_tail],
        "vllm-eagle3": [
            *vllm,
            "--speculative-config",
            json.dumps(eagle, separators=(",", ":")),
            *per_request,
            *vllm_tail,
        ],
        "vllm-ngram": [
            *vllm,
            "--speculative-config",
            json.dumps(ngram, separators=(",", ":")),
            *per_request,
            *vllm_tail,
        ],
        "sglang-base": [*sglang, *SGLANG_TAIL],
        "sglang-dflash": [
            *sglang,
            "--speculative-algorithm",
            "DFLASH",
            "--speculative-draft-model-path",
            "z-lab/Qwen3-8B-DFlash-b16",
            "--speculative-draft-model-revision",
            dflash.revision,
            "--speculative-num-draft-tokens",
            "16",
            "--speculative-draft-model-quantization",
            "unquant",
            *SGLANG_TAIL,
        ],
    }


def cpu_argv(python: str, pair: str) -> dict[str, list[str]]:
    """The demo's arms on the pair in folder `pair` (pair/target, drafted by pair/draft
    and by the EAGLE-3 head pair/eagle3)."""
    model = f"{pair}/target"
    head = [
        python,
        str(VLLM_CPU_LAUNCHER),
        "serve",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--served-model-name",
        "tiny",
        "--max-model-len",
        "1024",
        "--seed",
        "0",
        "--max-num-seqs",
        "64",
    ]
    # launch.dtype cpu_native: this host's choice (bfloat16 on AVX-512, float32 on AVX2).
    tail = ["--dtype", host_cpu_dtype().dtype, "--enforce-eager"]
    per_request = ["--per-request-spec-decode-metrics", "summary"]
    ngram = (
        '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":2}'
    )
    draft = f'{{"method":"draft_model","num_speculative_tokens":3,"model":"{pair}/draft"}}'
    eagle3 = f'{{"method":"eagle3","num_speculative_tokens":3,"model":"{pair}/eagle3"}}'
    return {
        "cpu-base": [*head, *tail],
        "cpu-ngram": [*head, "--speculative-config", ngram, *per_request, *tail],
        "cpu-draft": [*head, "--speculative-config", draft, *per_request, *tail],
        "cpu-eagle3": [*head, "--speculative-config", eagle3, *per_request, *tail],
    }


def test_every_registered_arm_runs_exactly_these_flags() -> None:
    study, unset = expand_study_leaving_unset(load_study(PREREG), GPU_ENV)
    assert unset == []
    expected = prereg_argv("/envs/%s/bin/python")
    assert sorted(expected) == sorted(a.name for a in study.arms)
    for arm in study.arms:
        shown = invocation(arm, study, 8000, unset)
        assert shown.argv == expected[arm.name], arm.name
        assert shown.env == {}, arm.name  # VLLM_USE_V1 is gone: vLLM 0.32 does not know it
        assert shlex.split(shown.line()) == expected[arm.name]


def test_every_demo_arm_runs_exactly_these_flags() -> None:
    study, unset = expand_study_leaving_unset(load_study(CPU_DEMO), CPU_ENV)
    expected = cpu_argv("/venv/bin/python", "/models/pair")
    assert sorted(expected) == sorted(a.name for a in study.arms)
    for arm in study.arms:
        shown = invocation(arm, study, 8000, unset)
        assert shown.argv == expected[arm.name], arm.name
        assert shown.env == CPU_VARS, arm.name
        words = shlex.split(shown.line())
        assert words == [f"{k}={v}" for k, v in CPU_VARS.items()] + expected[arm.name]


@pytest.mark.parametrize(
    "flags, cap, dtype",
    [
        ({"avx2", "fma"}, None, "float32"),
        ({"avx2", "fma", *AVX512_CORE_FLAGS}, None, "bfloat16"),
        ({"avx2", "fma", *AVX512_CORE_FLAGS}, "AVX2", "float32"),  # held to AVX2 kernels
        ({"avx2", "fma", *AVX512_CORE_FLAGS, *AMX_FLAGS, "avx512_fp16"}, None, "float16"),  # AMX
    ],
)
def test_the_demo_serves_the_dtype_that_keeps_its_step_memory_bound_on_this_kind_of_host(
    monkeypatch: pytest.MonkeyPatch, flags: set[str], cap: str | None, dtype: str
) -> None:
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda: frozenset(flags))
    if cap is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    study, unset = expand_study_leaving_unset(load_study(CPU_DEMO), CPU_ENV)
    for arm in study.arms:
        argv = invocation(arm, study, 8000, unset).argv
        assert argv[argv.index("--dtype") + 1] == dtype, arm.name
        setting = get_engine_kind(arm.engine).resolved_settings(arm, study)["dtype"]
        assert setting.startswith(f"{dtype} (launch.dtype cpu_native on "), setting


def test_cpu_native_is_refused_outside_the_cpu_build(tmp_path: Path) -> None:
    text = CPU_DEMO.read_text(encoding="utf-8").replace("engine: vllm-cpu", "engine: vllm", 1)
    path = tmp_path / "prereg.yaml"
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "launch.dtype cpu_native is for the CPU build" in proc.stderr


def test_no_arm_file_or_example_sets_vllm_use_v1() -> None:
    """vLLM 0.32 dropped VLLM_USE_V1: it is not in vllm/envs.py's environment_variables
    (vllm/envs.py:617), so vllm/platforms/interface.py:1446-1459 only logs "Unknown vLLM
    environment variable detected" for it (and refuses to start with
    --fail-on-environ-validation, vllm/engine/arg_utils.py:2221)."""
    files = [
        *sorted((ROOT / "arms").glob("*.yaml")),
        *sorted((ROOT / "examples").glob("*.yaml")),
        PREREG,
        ROOT / "README.md",
    ]
    for path in files:
        assert "VLLM_USE_V1" not in path.read_text(encoding="utf-8"), path


def _refuse(*args, **kwargs):
    """Popen.__init__ while printing a command: any process started fails the test."""
    raise AssertionError(f"a process was started: {args[1:2]}")


def dump_python(tmp_path: Path) -> Path:
    """An 'interpreter' that writes the argv and environment it was started with."""
    script = tmp_path / "dump-python"
    script.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)},"
        " open(os.environ['DUMP_TO'], 'w'))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def paste(line: str, tmp_path: Path, **env: str) -> dict:
    """Run a printed line the way a user pastes it into bash; what the engine would see."""
    out = tmp_path / "dump.json"
    subprocess.run(
        ["bash", "-c", line], check=True, timeout=60, env={**os.environ, **env, "DUMP_TO": str(out)}
    )
    return json.loads(out.read_text())


def pinned_at(monkeypatch: pytest.MonkeyPatch, python: Path) -> None:
    """Every pinned engine venv's python is `python` (engines.lock.toml's defaults)."""
    monkeypatch.setattr(
        pins,
        "default_interpreters",
        lambda path=None: {p.variable: str(python) for p in pins.load_pins().values()},
    )


@pytest.mark.parametrize(
    "arm", ["vllm-base", "sglang-dflash", "sglang-base", "vllm-eagle3", "vllm-ngram"]
)
def test_print_command_for_the_registered_arms_names_the_interpreter_run_would_start(
    arm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """With the interpreter variables unset, `run` starts the pinned venvs' pythons
    (harness/engines/install/pins.py); the printed line is that command, expanded as `run`
    expands it (serve printed `${SPECBENCH_VLLM_PYTHON}`, empty when pasted)."""
    for name in GPU_ENV:
        monkeypatch.delenv(name, raising=False)
    python = dump_python(tmp_path)
    pinned_at(monkeypatch, python)
    with monkeypatch.context() as patched:
        patched.setattr(subprocess.Popen, "__init__", _refuse)
        code = main(["serve", arm, "--prereg", str(PREREG), "--print-command", "--port", "8000"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert all(line.startswith("# ") for line in lines[:-1])
    assert "is not set here" not in out and "$" not in lines[-1]
    expected = prereg_argv("/envs/%s/bin/python")[arm]
    expected[0] = str(python)
    assert shlex.split(lines[-1]) == expected
    launch = expand_study(load_study(PREREG)).arm(arm).launch
    assert launch is not None and launch.python == str(python)  # run's expansion
    assert "VLLM_USE_V1" not in out
    if arm == "sglang-dflash":
        assert (
            "# drafter precision: checkpoint's own (--speculative-draft-model-quantization"
            " unquant" in out
        )
        assert "# min free slots delay: off (--min-free-slots-delay 1)" in out
        # SGLang 0.5.23 serves DFLASH through its spec-v2 worker alone, which returns the
        # logprobs the identity cells ask for: nothing to set (shown.env stays empty).
        assert "# speculative worker: DFlashWorkerV2, SGLang 0.5.23's only DFLASH worker" in out
        assert "SGLANG_ENABLE_SPEC_V2=" not in lines[-1]
        for flag in (
            "--speculative-algorithm DFLASH",
            "--speculative-draft-model-path",
            "--speculative-draft-model-revision",
            "--speculative-num-draft-tokens 16",
            "--speculative-draft-model-quantization unquant",
        ):
            assert flag in lines[-1]
    if arm == "vllm-eagle3":
        assert (
            "# drafter precision: checkpoint's own (--speculative-config quantization unset" in out
        )
    # Pasted, the line starts exactly that argv.
    seen = paste(lines[-1], tmp_path)
    assert seen["argv"] == expected[1:]


def test_print_command_for_the_demo_keeps_unset_variables_expandable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    for name in CPU_ENV:
        monkeypatch.delenv(name, raising=False)
    python = dump_python(tmp_path)
    pinned_at(monkeypatch, python)  # the CPU engine's interpreter, as run resolves it
    with monkeypatch.context() as patched:
        patched.setattr(subprocess.Popen, "__init__", _refuse)
        code = main(["serve", "cpu-draft", "--prereg", str(CPU_DEMO), "--print-command"])
    out = capsys.readouterr().out
    assert code == 0
    assert "# the port was free just now; a run picks a free one" in out
    assert "# SPECBENCH_TINY_PAIR is not set here: export it" in out
    assert "SPECBENCH_VLLM_CPU_PYTHON" not in out
    line = out.splitlines()[-1]
    words = shlex.split(line)
    port = words[words.index("--port") + 1]
    assert words[len(CPU_VARS)] == str(python)
    seen = paste(line, tmp_path, SPECBENCH_TINY_PAIR="/models/my pair")  # a space: the quoting
    expected = cpu_argv("-", "/models/my pair")["cpu-draft"][1:]
    expected[expected.index("--port") + 1] = port
    assert seen["argv"] == expected
    assert {k: seen["env"][k] for k in CPU_VARS} == CPU_VARS  # the variables the harness sets


def test_print_command_notes_a_missing_interpreter(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("SPECBENCH_TINY_PAIR", "/models/pair")
    monkeypatch.setenv("SPECBENCH_VLLM_CPU_PYTHON", "/nonexistent/bin/python")
    assert (
        main(["serve", "cpu-base", "--prereg", str(CPU_DEMO), "--print-command", "--port", "8000"])
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "# interpreter /nonexistent/bin/python does not exist (scripts/setup.sh installs it):"
        " the line is printed anyway"
    ) in out
    assert (
        shlex.split(out.splitlines()[-1])[4:]
        == cpu_argv("/nonexistent/bin/python", "/models/pair")["cpu-base"]
    )


def test_print_command_with_a_bad_arm_is_exit_2_and_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse)
    assert main(["serve", "nope", "--prereg", str(PREREG), "--print-command"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"specbench: {PREREG}: no arm named 'nope' (arms: vllm-base, sglang-dflash, sglang-base,"
        " vllm-eagle3, vllm-ngram)"
    ]


def test_quote_keeps_only_unset_variables_expandable() -> None:
    assert quote("plain", set()) == "plain"
    assert quote("${A}/x y", set()) == "'${A}/x y'"  # set (or not ours): literal
    assert quote("${A}/x y", {"A"}) == '"${A}/x y"'
    assert (
        quote('{"m":"${A}","c":"$`\\"}', {"A"}) == '"{\\"m\\":\\"${A}\\",\\"c\\":\\"\\$\\`\\\\\\"}"'
    )
    assert shlex.split(quote('{"m":"${A}"}', {"A"})) == ['{"m":"${A}"}']
