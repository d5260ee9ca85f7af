"""engines.lock.toml: the pins agree with the adapters, resolve on the index for Linux
x86-64 (metadata only), install into a venv of their own, default the arms'
interpreters, and each environment's package list lands in the run manifest."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.engines import ENGINE_KINDS
from harness.engines.install.install import install_commands, install_engine
from harness.engines.install.pin_check import IndexUnreachable, check_pin, check_pins
from harness.engines.install.pins import EnginePin, load_pins
from harness.engines.launch.base import expand_study
from harness.engines.launch.vllm_engine import VLLM_CPU_VERSION
from harness.errors import InputError, SpecbenchError
from harness.prereg import load_study
from harness.prereg.schema import Study
from harness.run.environments import record_environments
from harness.run.store import RunStore
from harness.rundir.manifest import Manifest

ROOT = Path(__file__).resolve().parents[2]


def test_the_lock_pins_what_the_adapters_were_checked_against() -> None:
    pins = load_pins()
    assert set(pins) == {"vllm", "sglang", "vllm-cpu", "sglang-args"}
    assert ENGINE_KINDS["vllm"].version_matches(pins["vllm"].version)
    assert ENGINE_KINDS["sglang"].version_matches(pins["sglang"].version)
    assert pins["vllm-cpu"].version == VLLM_CPU_VERSION
    assert pins["vllm"].gpu and pins["sglang"].gpu and not pins["vllm-cpu"].gpu
    # The suite parses the SGLang arms with the very release they run on.
    assert (pins["sglang-args"].package, pins["sglang-args"].version) == ("sglang", "0.5.23")
    assert pins["sglang-args"].test_only and not pins["sglang-args"].gpu
    # Every pin's variable is what the registered arms (or the CPU demo) name.
    texts = "".join(
        p.read_text() for p in [*ROOT.glob("arms/*.yaml"), *ROOT.glob("examples/*.yaml")]
    )
    for p in pins.values():
        assert p.test_only or "${" + p.variable + "}" in texts, p.variable
        assert p.default_interpreter().parent.parent.name == f"{p.name}-{p.version}"


@pytest.mark.registry
def test_every_pin_resolves_for_linux_x86_64() -> None:
    """Asks the package index for each pin's files (no wheel is downloaded). Skipped
    only when the index cannot be reached at all."""
    try:
        results = check_pins(list(load_pins().values()))
    except IndexUnreachable as err:
        pytest.skip(f"the package index is unreachable: {err}")
    for r in results:
        assert r.ok, r.line()
        assert r.wheel is not None
        assert r.wheel.endswith("x86_64.whl") and f"-{r.pin.version}-" in r.wheel, r.wheel


def fake_pin(**changes) -> EnginePin:
    return EnginePin.model_validate(
        {
            "name": "fake",
            "package": "specbench-fake-engine",
            "version": "1.2.3",
            "module": "specbench_fake_engine",
            "variable": "SPECBENCH_FAKE_PYTHON",
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
            "platform": "manylinux_2_28_x86_64",
            "gpu": False,
            **changes,
        }
    )


def entry(filename: str, requires: str | None = ">=3.11", yanked: bool = False) -> dict:
    return {"filename": filename, "requires-python": requires, "yanked": yanked}


def test_pin_check_judges_platform_python_and_yanked_files() -> None:
    pin = fake_pin(version="1.0", python="3.12", platform="manylinux_2_28_x86_64")
    name = "specbench_fake_engine-1.0"
    ok = check_pin(
        pin, [entry(f"{name}.tar.gz"), entry(f"{name}-cp38-abi3-manylinux_2_17_x86_64.whl")]
    )
    assert ok.wheel is not None
    assert ok.ok and ok.wheel.endswith("manylinux_2_17_x86_64.whl")
    newer_glibc = check_pin(pin, [entry(f"{name}-cp312-cp312-manylinux_2_34_x86_64.whl")])
    assert not newer_glibc.ok and "no wheel for this platform" in newer_glibc.problems[0]
    arm = check_pin(pin, [entry(f"{name}-cp312-cp312-manylinux_2_28_aarch64.whl")])
    assert not arm.ok
    old_python = check_pin(pin, [entry(f"{name}-cp38-abi3-manylinux_2_28_x86_64.whl", "<3.12")])
    assert not old_python.ok and "requires Python <3.12" in old_python.problems[0]
    yanked = check_pin(pin, [entry(f"{name}-py3-none-any.whl", yanked=True)])
    assert not yanked.ok and "yanked" in yanked.problems[0]
    absent = check_pin(pin, [entry("specbench_fake_engine-1.1-py3-none-any.whl")])
    assert absent.problems == ["the index has no wheel of specbench-fake-engine 1.0"]
    assert check_pin(pin, [entry(f"{name}-py3-none-any.whl")]).ok


def test_a_bad_lock_file_is_one_line_naming_file_and_field(tmp_path: Path) -> None:
    lock = tmp_path / "engines.lock.toml"
    lock.write_text('[vllm]\npackage = "vllm"\nversion = "0.32.0"\n')
    with pytest.raises(InputError) as caught:
        load_pins(lock)
    assert caught.value.exit_code == 2
    assert caught.value.lines == [f"{lock}: vllm.module: Field required"]
    lock.write_text("[vllm\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_pins(lock)


def python_of(study: Study, arm: str) -> str | None:
    launch = study.arm(arm).launch
    assert launch is not None, arm
    return launch.python


def test_arms_default_to_the_pinned_interpreters(monkeypatch: pytest.MonkeyPatch) -> None:
    pins = load_pins()
    monkeypatch.delenv("SPECBENCH_VLLM_PYTHON", raising=False)
    monkeypatch.delenv("SPECBENCH_SGLANG_PYTHON", raising=False)
    study = expand_study(load_study(ROOT / "prereg.yaml"))
    assert python_of(study, "vllm-base") == str(pins["vllm"].default_interpreter())
    assert python_of(study, "sglang-dflash") == str(pins["sglang"].default_interpreter())
    monkeypatch.setenv("SPECBENCH_VLLM_PYTHON", "/opt/my-vllm/bin/python")  # an override wins
    study = expand_study(load_study(ROOT / "prereg.yaml"))
    assert python_of(study, "vllm-ngram") == "/opt/my-vllm/bin/python"
    assert python_of(study, "sglang-base") == str(pins["sglang"].default_interpreter())


def build_wheel(folder: Path, version: str, module_version: str | None = None) -> Path:
    """A pure-Python wheel of `specbench-fake-engine`, made by hand (no build backend)."""
    dist = f"specbench_fake_engine-{version}.dist-info"
    files = {
        "specbench_fake_engine/__init__.py": f"__version__ = {module_version or version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: specbench-fake-engine\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: specbench-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"specbench_fake_engine-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def test_install_makes_a_venv_of_its_own_and_reuses_it(tmp_path, monkeypatch) -> None:
    """The pip route, for real, from a local wheel folder (nothing from the network)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "1.2.3")
    pin = fake_pin(
        find_links=[str(wheels), str(tmp_path / "absent")], remove_after=["not-installed-anywhere"]
    )
    said: list[str] = []
    python = install_engine(pin, cache=tmp_path / "cache", quiet=True, say=said.append)
    assert python == tmp_path / "cache" / "engines" / "fake-1.2.3" / "bin" / "python"
    marker = json.loads((python.parent.parent / ".complete").read_text())
    assert marker["requirement"] == "specbench-fake-engine==1.2.3" and marker["tool"] == "pip"
    assert said[-1] == f"fake: specbench_fake_engine 1.2.3 ready at {python}"

    def no_run(cmd):  # a finished venv is reused: nothing is run
        raise AssertionError(f"ran {cmd}")

    assert install_engine(pin, cache=tmp_path / "cache", run=no_run, say=said.append) == python
    assert said[-1].endswith("(reused)")


def test_install_fails_on_a_missing_pin_or_a_wrong_version(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "2.0.0", module_version="9.9.9")
    with pytest.raises(SpecbenchError, match=r"pip install .*specbench-fake-engine==1.2.3` exited"):
        install_engine(
            fake_pin(find_links=[str(wheels)]), cache=tmp_path / "c", quiet=True, say=lambda _: None
        )
    with pytest.raises(SpecbenchError, match="imports specbench_fake_engine as 9.9.9, not 2.0.0"):
        install_engine(
            fake_pin(version="2.0.0", find_links=[str(wheels)]),
            cache=tmp_path / "c",
            quiet=True,
            say=lambda _: None,
        )
    assert not (tmp_path / "c" / "engines" / "fake-2.0.0" / ".complete").exists()


def test_uv_is_used_where_it_is_installed(tmp_path: Path) -> None:
    pin = fake_pin(python="3.12", find_links=[str(tmp_path)], remove_after=["torchvision"])
    venv = tmp_path / "v"
    py = str(venv / "bin" / "python")
    assert install_commands(pin, venv, uv="/bin/uv", python=None) == [
        ["/bin/uv", "venv", "--seed", "--python", "3.12", str(venv)],
        [
            "/bin/uv",
            "pip",
            "install",
            "--compile-bytecode",
            "--python",
            py,
            "--find-links",
            str(tmp_path),
            "specbench-fake-engine==1.2.3",
        ],
        ["/bin/uv", "pip", "uninstall", "--python", py, "torchvision"],
    ]
    pip = install_commands(pin, venv, uv=None, python="/usr/bin/python3.12")
    assert pip[0] == ["/usr/bin/python3.12", "-m", "venv", str(venv)]
    assert pip[1][:3] == [py, "-m", "pip"] and pip[2][-2:] == ["-y", "torchvision"]


def test_the_manifest_lists_every_engine_environment(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create_manifest(Manifest(run_id="run"))
    study = expand_study(load_study(ROOT / "examples" / "scripted-pass.yaml"))
    assert record_environments(store, study) == []
    env = store.manifest().to_json()["engine_environments"][sys.executable]
    names = {p["name"].lower(): p["version"] for p in env["packages"]}
    import pydantic

    assert names["pydantic"] == pydantic.VERSION and env["arms"] == ["base", "drafter"]
    assert env["pin"] is None and env["python_version"] == sys.version.split()[0]

    # A resume that finds the environment changed records it as a deviation.
    def older(m: Manifest) -> None:
        m.engine_environments[sys.executable].packages = [{"name": "pydantic", "version": "0.1"}]

    store.edit_manifest(older)
    (change,) = record_environments(store, study)
    assert f"pydantic: 0.1 -> {pydantic.VERSION}" in change
    assert store.manifest().to_json()["deviations"][-1]["what"] == change


def test_a_test_only_pin_installs_without_dependencies_and_with_its_stand_ins(
    tmp_path, monkeypatch
):
    pin = fake_pin(
        no_deps=True, with_packages=["extra==1.0"], stand_ins=["gpu_compiler"], test_only=True
    )
    venv = tmp_path / "v"
    uv = install_commands(pin, venv, uv="/bin/uv", python=None)[1]
    assert "--no-deps" in uv and uv[-2:] == ["specbench-fake-engine==1.2.3", "extra==1.0"]
    # For real (pip, a local wheel): the stand-in imports, and fails on any use.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "1.2.3")
    python = install_engine(
        fake_pin(no_deps=True, stand_ins=["gpu_compiler"], find_links=[str(wheels)]),
        cache=tmp_path / "cache",
        quiet=True,
        say=lambda _: None,
    )
    proc = subprocess.run(
        [str(python), "-c", "import gpu_compiler; gpu_compiler.jit"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "AttributeError: gpu_compiler is a stand-in here" in proc.stderr
