"""`specbench engines warm sglang`: SGLang's DeepGEMM compile (python -m
sglang.compile_deep_gemm) with the registered model and an SGLang arm's own launch flags,
run in the SGLang engine interpreter; and the plan's line on whether the first SGLang start
still compiles. The real compile needs a GPU and SGLang: a scripted interpreter stands in."""

from __future__ import annotations

import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness import paths
from harness.cli import main
from harness.engines.install import warm
from harness.engines.install.deepgemm import (
    COMPILE_ESTIMATE_S,
    compile_command,
    plan_note,
    warm_arm,
    write_marker,
)
from harness.plan import estimate, plan_cells
from harness.prereg import load_study
from harness.prereg.schema import Study
from tests.engines.registered_flags import SGLANG_TAIL, sglang_flags

ROOT = Path(__file__).resolve().parents[2]
PREREG = ROOT / "prereg.yaml"


def compile_s(study: Study) -> float | None:
    """The seconds the plan counts for DeepGEMM's compile (None: no SGLang arm)."""
    note = plan_note(study)
    return None if note is None else note[1]


def registered_flags() -> list[str]:
    """sglang-base's launch flags in prereg.yaml (port 30000), then what the warm adds."""
    return [*sglang_flags(30000), *SGLANG_TAIL, "--tp-size", "1", "--timeout", "3600"]


def scripted_python(tmp_path: Path, *, probe_exit: int = 0, compile_exit: int = 0) -> Path:
    """An 'interpreter': `-c` (the environment probe) exits probe_exit; anything else (the
    compile) records its argv and environment in $DUMP_TO, leaves a kernel file in
    $SGLANG_DG_CACHE_DIR, prints SGLang's closing line and exits compile_exit."""
    script = tmp_path / "sglang-python"
    script.write_text(
        f"#!{sys.executable}\nimport json, os, sys, time\n"
        f"if sys.argv[1] == '-c':\n    sys.exit({probe_exit})\n"
        "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, open(os.environ['DUMP_TO'], 'w'))\n"
        "os.makedirs(os.environ['SGLANG_DG_CACHE_DIR'], exist_ok=True)\n"
        "open(os.path.join(os.environ['SGLANG_DG_CACHE_DIR'], 'kernel.cubin'), 'w').close()\n"
        "print('Begin DeepGEMM Kernels compilation...', flush=True)\ntime.sleep(1)\n"
        f"print('DeepGEMM Kernels compilation finished successfully.' if {compile_exit} == 0"
        " else 'RuntimeError: boom', flush=True)\n"
        f"sys.exit({compile_exit})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's specbench cache and SGLang's kernel cache, both under tmp_path."""
    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "specbench-cache")
    monkeypatch.setenv("SGLANG_DG_CACHE_DIR", str(tmp_path / "deep_gemm"))
    monkeypatch.setenv("DUMP_TO", str(tmp_path / "dump.json"))
    monkeypatch.setattr(warm, "PROGRESS_EVERY_S", 0.05)
    return tmp_path


def _refuse(*args, **kwargs):
    raise AssertionError(f"a process was started: {args[1:2]}")


def test_print_command_runs_the_compile_module_with_the_arms_flags_in_the_sglang_interpreter(
    machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    python = scripted_python(machine)
    monkeypatch.setenv("SPECBENCH_SGLANG_PYTHON", str(python))
    with monkeypatch.context() as patched:
        patched.setattr(subprocess.Popen, "__init__", _refuse)
        code = main(
            [
                "engines",
                "warm",
                "sglang",
                "--prereg",
                str(PREREG),
                "--print-command",
                "--port",
                "30000",
            ]
        )
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith(
        "# specbench engines warm sglang would compile DeepGEMM FP8 kernels for Qwen/Qwen3-8B-FP8"
    )
    assert "tp 1, with arm sglang-base's launch flags" in lines[0]
    assert f"cache {machine / 'deep_gemm'}" in lines[0]
    assert shlex.split(lines[-1]) == [
        str(python),
        "-m",
        "sglang.compile_deep_gemm",
        *registered_flags(),
    ]
    assert not (machine / "dump.json").exists()


def test_the_arms_own_tensor_parallel_size_is_kept() -> None:
    study = load_study(PREREG)
    base = study.arm("sglang-base")
    assert base.launch is not None
    launch = base.launch.model_copy(update={"extra_args": [*base.launch.extra_args, "--tp", "2"]})
    arm = base.model_copy(update={"launch": launch, "name": "tp2"})
    study = study.model_copy(update={"arms": [arm]})
    cmd = compile_command(warm_arm(study), study, "/py", "127.0.0.1", 1)
    assert cmd[:3] == ["/py", "-m", "sglang.compile_deep_gemm"]
    assert cmd[-5:] == ["--disable-radix-cache", "--tp", "2", "--timeout", "3600"]
    assert "--tp-size" not in cmd
    assert warm_arm(study).name == "tp2"
    with pytest.raises(Exception, match="no SGLang arm named 'vllm-base'"):
        warm_arm(load_study(PREREG), "vllm-base")


def test_a_missing_environment_is_one_line_and_exit_2(
    machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("SPECBENCH_SGLANG_PYTHON", str(machine / "nowhere" / "python"))
    assert main(["engines", "warm", "sglang", "--prereg", str(PREREG)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"specbench: the SGLang engine environment is missing: {machine}/nowhere/python"
        " does not exist (`specbench engines install sglang` installs sglang==0.5.23,"
        " or set SPECBENCH_SGLANG_PYTHON to the SGLang environment's python)"
    ]
    # An interpreter without sglang.compile_deep_gemm: also refused before anything starts.
    monkeypatch.setenv("SPECBENCH_SGLANG_PYTHON", str(scripted_python(machine, probe_exit=3)))
    assert main(["engines", "warm", "sglang", "--prereg", str(PREREG)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "has no sglang.compile_deep_gemm (exit 3" in err[0]
    assert not (machine / "dump.json").exists()


def test_warm_runs_the_compile_with_progress_and_the_plan_then_counts_no_compile(
    machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    study = load_study(PREREG)
    cells = plan_cells(study)
    cold = estimate(study, cells)
    note = plan_note(study)
    assert note is not None
    line, added = note
    assert added == COMPILE_ESTIMATE_S
    assert line in cold.assumptions
    assert "includes DeepGEMM's JIT compile of the FP8 kernels (Qwen/Qwen3-8B-FP8, tp 1" in line
    assert "run `specbench engines warm sglang` on the GPU host before the run" in line

    python = scripted_python(machine)
    monkeypatch.setenv("SPECBENCH_SGLANG_PYTHON", str(python))
    code = main(["engines", "warm", "sglang", "--prereg", str(PREREG), "--port", "30000"])
    out = capsys.readouterr().out
    assert code == 0, out
    seen = json.loads((machine / "dump.json").read_text())
    assert seen["argv"] == ["-m", "sglang.compile_deep_gemm", *registered_flags()]
    assert out.startswith("warming DeepGEMM FP8 kernels for Qwen/Qwen3-8B-FP8")
    assert ": compiling; log: Begin DeepGEMM Kernels compilation..." in out  # progress
    assert "done in" in out and str(machine / "deep_gemm") in out

    note = plan_note(study)
    assert note is not None
    warm_line, added = note
    assert added == 0.0
    assert warm_line.startswith(
        "the first SGLang start includes no DeepGEMM compile:"
        " `specbench engines warm sglang` compiled the FP8 kernels for"
        " Qwen/Qwen3-8B-FP8 at tp 1 on this machine"
    )
    warmed = estimate(study, cells)
    assert cold.seconds - warmed.seconds == pytest.approx(COMPILE_ESTIMATE_S)
    assert main(["plan", str(PREREG)]) == 0
    assert "includes no DeepGEMM compile" in capsys.readouterr().out


def test_a_failed_compile_is_exit_1_with_the_log_tail_and_leaves_no_record(
    machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("SPECBENCH_SGLANG_PYTHON", str(scripted_python(machine, compile_exit=1)))
    assert main(["engines", "warm", "sglang", "--prereg", str(PREREG)]) == 1
    err = capsys.readouterr().err
    assert "specbench: DeepGEMM compile failed (exit 1)" in err
    assert "specbench:   | RuntimeError: boom" in err
    assert compile_s(load_study(PREREG)) == COMPILE_ESTIMATE_S


def test_the_plan_says_nothing_of_deepgemm_without_an_sglang_arm(machine: Path) -> None:
    study = load_study(ROOT / "examples" / "scripted-pass.yaml")
    assert plan_note(study) is None
    assert not [a for a in estimate(study, plan_cells(study)).assumptions if "DeepGEMM" in a]


def test_a_record_whose_kernel_cache_is_gone_counts_as_cold(machine: Path) -> None:
    study = load_study(PREREG)
    cache = machine / "gone"
    cache.mkdir()
    (cache / "kernel.cubin").touch()
    write_marker(study, warm_arm(study), cache, 600.0)
    assert compile_s(study) == 0.0
    (cache / "kernel.cubin").unlink()
    cache.rmdir()
    assert compile_s(study) == COMPILE_ESTIMATE_S
