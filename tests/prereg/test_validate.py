"""`specbench validate`: the registered study seals; malformed studies fail clearly."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.prereg import load_study, seal_of

ROOT = Path(__file__).resolve().parents[2]

BASE: dict = {
    "title": "t",
    "registered": "2026-11-30",
    "hardware": {"gpu": "H100", "memory_bandwidth_gb_s": 2000, "dense_tflops": 1000},
    "model": {"id": "m", "params_billion": 8},
    "arms": [
        {"name": "v-base", "engine": "vllm", "launch": {"python": "/x/python"}},
        {
            "name": "v-ngram",
            "engine": "vllm",
            "launch": {"python": "/x/python"},
            "drafter": {"method": "ngram", "num_draft_tokens": 3},
            "baseline": "v-base",
        },
        {"name": "s-base", "engine": "sglang", "launch": {"python": "/y/python"}},
    ],
    "loads": {"closed_loop": {"concurrency": [1, 2, 4, 8]}},
    "tasks": [
        {"name": "chat", "kind": "chat", "uses": ["speed", "identity"], "max_tokens": 64},
        {"name": "gsm8k", "kind": "gsm8k", "uses": ["accuracy"], "max_tokens": 64},
    ],
}


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, data: object, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_registered_prereg_validates_and_prints_seal(capsys):
    code, out, err = run_cli(capsys, "validate", str(ROOT / "prereg.yaml"))
    assert code == 0, err
    seal = re.search(r"^seal: ([0-9a-f]{64})$", out, re.M)
    assert seal, out
    assert seal.group(1) == seal_of(load_study(ROOT / "prereg.yaml"))
    for arm in ("vllm-base", "vllm-eagle3", "vllm-ngram", "sglang-base", "sglang-dflash"):
        assert arm in out


def test_seal_ignores_key_order_comments_and_file_split(tmp_path):
    study = load_study(ROOT / "prereg.yaml")
    # Inline every arm, reverse every mapping's key order, add comments.
    data = yaml.safe_load((ROOT / "prereg.yaml").read_text())
    data["arms"] = [yaml.safe_load((ROOT / a["file"]).read_text()) for a in data["arms"]]

    def reverse(obj):
        if isinstance(obj, dict):
            return {k: reverse(obj[k]) for k in reversed(list(obj))}
        if isinstance(obj, list):
            return [reverse(x) for x in obj]
        return obj

    text = "# a comment\n" + yaml.safe_dump(reverse(data), sort_keys=False).replace(
        "\ntasks:", "\n# another comment\ntasks:"
    )
    (tmp_path / "reordered.yaml").write_text(text)
    assert seal_of(load_study(tmp_path / "reordered.yaml")) == seal_of(study)


@pytest.mark.parametrize(
    "path,value",
    [
        (("sampling", "temperature"), 0.1),
        (("loads", "closed_loop", "concurrency"), [1, 2, 4, 8, 16, 32]),
        (("bars", "stop", "threshold"), 1.25),
        (("tasks", 0, "max_tokens"), 511),
        (("model", "revision"), "abc123"),
        # The drafter's precision and SGLang's admission delay are registered settings.
        (("arms", 1, "drafter", "quantization"), "fp8"),
        (("arms", 2, "min_free_slots_delay"), 1),
    ],
)
def test_changing_any_value_changes_the_seal(tmp_path, path, value):
    data = copy.deepcopy(BASE)
    before = seal_of(load_study(write(tmp_path, data)))
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    node[path[-1]] = value
    assert seal_of(load_study(write(tmp_path, data, "changed.yaml"))) != before


def test_a_default_written_out_keeps_the_seal(tmp_path):
    data = copy.deepcopy(BASE)
    before = seal_of(load_study(write(tmp_path, data)))
    data["sampling"] = {"temperature": 0.0}
    data["arms"][1]["drafter"]["quantization"] = "checkpoint"
    assert seal_of(load_study(write(tmp_path, data, "explicit.yaml"))) == before


def test_changing_an_arm_file_changes_the_seal(tmp_path):
    data = copy.deepcopy(BASE)
    arm_file = tmp_path / "arm.yaml"
    arm_file.write_text(yaml.safe_dump(data["arms"][1]))
    data["arms"][1] = {"file": "arm.yaml"}
    before = seal_of(load_study(write(tmp_path, data)))
    changed = dict(BASE["arms"][1], drafter={"method": "ngram", "num_draft_tokens": 4})
    arm_file.write_text(yaml.safe_dump(changed))
    assert seal_of(load_study(tmp_path / "study.yaml")) != before


def _set(data, path, value):
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value


DELETE = object()

# (case id, path to change, new value, field path the message must name, words it must say)
MALFORMED = [
    (
        "typo-key",
        ("loads", "closed_loop", "concurency"),
        [1, 2],
        "loads.closed_loop.concurency",
        "did you mean 'concurrency'",
    ),
    (
        "wrong-type",
        ("arms", 1, "drafter", "num_draft_tokens"),
        "three",
        "arms[1].drafter.num_draft_tokens",
        "integer",
    ),
    (
        "non-positive",
        ("arms", 1, "drafter", "num_draft_tokens"),
        0,
        "arms[1].drafter.num_draft_tokens",
        "greater than 0",
    ),
    ("baseline-other-engine", ("arms", 1, "baseline"), "s-base", "arms[1].baseline", "same engine"),
    ("baseline-missing", ("arms", 1, "baseline"), "nope", "arms[1].baseline", "no arm named"),
    ("duplicate-arm", ("arms", 2, "name"), "v-base", "arms[2].name", "duplicate arm name"),
    (
        "empty-levels",
        ("loads", "closed_loop", "concurrency"),
        [],
        "loads.closed_loop.concurrency",
        "at least one",
    ),
    (
        "unsorted-levels",
        ("loads", "closed_loop", "concurrency"),
        [4, 2, 1],
        "loads.closed_loop.concurrency",
        "increasing",
    ),
    ("missing-field", ("model", "id"), DELETE, "model.id", "missing"),
    ("unknown-engine", ("arms", 0, "engine"), "tensorrt", "arms[0].engine", "'vllm'"),
    ("drafter-without-baseline", ("arms", 1, "baseline"), DELETE, "arms[1]", "needs a baseline"),
    (
        "launch-and-attach",
        ("arms", 0, "attach"),
        {"base_url": "http://h:1", "metrics": "vllm", "served_model": "m"},
        "arms[0]",
        "exactly one",
    ),
    ("bad-date", ("registered",), "30/11/2026", "registered", "YYYY-MM-DD"),
    ("duplicate-task", ("tasks", 1, "name"), "chat", "tasks[1].name", "duplicate task"),
    ("chat-accuracy", ("tasks", 0, "uses"), ["speed", "accuracy"], "tasks[0]", "no correctness"),
    (
        "bar-level-not-run",
        ("bars",),
        {"pass": {"speed": {"concurrencies": [1, 3]}}},
        "bars.pass.speed.concurrencies",
        "[3]",
    ),
    (
        "accuracy-unknown-task",
        ("bars",),
        {"pass": {"accuracy": {"tasks": ["mmlu"]}}},
        "bars.pass.accuracy.tasks[0]",
        "no task named",
    ),
    (
        "negative-temperature",
        ("sampling",),
        {"temperature": -1},
        "sampling.temperature",
        "greater than or equal",
    ),
    (
        "bad-attach-url",
        ("arms", 2),
        {
            "name": "s-base",
            "engine": "sglang",
            "attach": {"base_url": "h:1", "metrics": "sglang", "served_model": "m"},
        },
        "arms[2].attach.base_url",
        "http",
    ),
    ("unknown-task-use", ("tasks", 0, "uses"), ["speed", "latency"], "tasks[0].uses[1]", "'speed'"),
    (
        "open-loop-unknown-task",
        ("loads", "open_loop"),
        {"task": "nope", "rates_relative_to_knee": [1.0], "requests": 10},
        "loads.open_loop.task",
        "no task named",
    ),
    (
        "admission-delay-off-sglang",
        ("arms", 0, "min_free_slots_delay"),
        1,
        "arms[0]",
        "SGLang setting",
    ),
    (
        "admission-delay-negative",
        ("arms", 2, "min_free_slots_delay"),
        -1,
        "arms[2].min_free_slots_delay",
        "greater than or equal to 0",
    ),
    (
        "empty-drafter-quantization",
        ("arms", 1, "drafter", "quantization"),
        "",
        "arms[1].drafter.quantization",
        "at least 1 character",
    ),
    (
        "open-loop-unbounded",
        ("loads", "open_loop"),
        {"task": "chat", "rates_relative_to_knee": [1.0]},
        "loads.open_loop",
        "duration_s or requests",
    ),
]


@pytest.mark.parametrize("case", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_study_fails_with_located_message(tmp_path, capsys, case):
    _, path, value, field, words = case
    data = copy.deepcopy(BASE)
    _set(data, path, value)
    study = write(tmp_path, data)
    code, out, err = run_cli(capsys, "validate", str(study))
    assert code == 2
    assert "Traceback" not in err + out
    lines = err.strip().splitlines()
    hit = [ln for ln in lines if f": {field}:" in ln]
    assert hit, f"no line names {field}: {err}"
    assert any(words in ln for ln in hit), err
    assert all(re.match(rf"specbench: {re.escape(str(study))}:\d+: ", ln) for ln in hit), err


def test_yaml_syntax_error_names_its_line(tmp_path, capsys):
    study = tmp_path / "broken.yaml"
    study.write_text("title: t\narms:\n  - name: [unclosed\n  - other\n")
    code, _, err = run_cli(capsys, "validate", str(study))
    assert code == 2
    assert re.search(rf"{re.escape(str(study))}:\d+: YAML syntax error", err), err
    assert "Traceback" not in err


def test_unknown_key_in_an_arm_file_names_that_file(tmp_path, capsys):
    data = copy.deepcopy(BASE)
    arm = dict(BASE["arms"][1], drafter={"method": "ngram", "num_draft_tokens": 3, "k": 2})
    (tmp_path / "arm.yaml").write_text(yaml.safe_dump(arm, sort_keys=False))
    data["arms"][1] = {"file": "arm.yaml"}
    code, _, err = run_cli(capsys, "validate", str(write(tmp_path, data)))
    assert code == 2
    assert f"{tmp_path / 'arm.yaml'}:" in err and "arms[1].drafter.k: unknown key" in err, err


@pytest.mark.parametrize(
    "text,words",
    [("", "expected a mapping"), ("- a\n- b\n", "expected a mapping")],
    ids=["empty", "list"],
)
def test_top_level_must_be_a_mapping(tmp_path, capsys, text, words):
    study = tmp_path / "s.yaml"
    study.write_text(text)
    code, _, err = run_cli(capsys, "validate", str(study))
    assert code == 2 and words in err


def test_missing_file_and_missing_arm_file(tmp_path, capsys):
    code, _, err = run_cli(capsys, "validate", str(tmp_path / "nope.yaml"))
    assert code == 2 and "file not found" in err
    data = copy.deepcopy(BASE)
    data["arms"][0] = {"file": "arms/missing.yaml"}
    code, _, err = run_cli(capsys, "validate", str(write(tmp_path, data)))
    assert code == 2 and "arms[0].file" in err and "file not found" in err


def test_bad_invocation_exits_2_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "usage" in proc.stderr


def test_malformed_study_in_a_real_process_prints_no_traceback(tmp_path):
    data = copy.deepcopy(BASE)
    data["arms"][1]["drafter"]["num_draft_tokens"] = "many"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(write(tmp_path, data))],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "arms[1].drafter.num_draft_tokens" in proc.stderr


# --- duplicate keys: a second block must not silently replace the first ----------------

DUPLICATE_LOADS = """
loads:
  closed_loop:
    concurrency: [1, 2, 4, 64]
"""


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _line_of(path: Path, text: str, occurrence: int = 1) -> int:
    """The 1-based line of the `occurrence`-th line of `path` that starts with `text`."""
    hits = [n for n, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith(text)]
    return hits[occurrence - 1]


def test_a_duplicated_top_level_block_is_an_error(tmp_path, capsys):
    study = write(tmp_path, BASE)
    study.write_text(study.read_text() + DUPLICATE_LOADS)
    first, second = _line_of(study, "loads:", 1), _line_of(study, "loads:", 2)
    code, out, err = run_cli(capsys, "validate", str(study))
    assert code == 2 and "seal" not in out
    line = _one_error_line(err)
    assert line.startswith(f"specbench: {study}:{second}: loads: duplicate key 'loads'"), line
    assert f"first at line {first}" in line


def test_a_duplicated_nested_key_is_an_error(tmp_path, capsys):
    study = write(tmp_path, BASE)
    text = study.read_text()
    # A second `concurrency:` inside the same closed_loop mapping.
    assert "    concurrency:\n" in text
    study.write_text(
        text.replace("    concurrency:\n", "    concurrency: [64]\n    concurrency:\n")
    )
    first = _line_of(study, "    concurrency: [64]")
    second = first + 1
    code, _, err = run_cli(capsys, "validate", str(study))
    assert code == 2
    line = _one_error_line(err)
    assert f"{study}:{second}: loads.closed_loop.concurrency: duplicate key 'concurrency'" in line
    assert f"first at line {first}" in line


def test_a_duplicated_key_in_an_arm_file_names_that_file(tmp_path, capsys):
    data = copy.deepcopy(BASE)
    arm_file = tmp_path / "arm.yaml"
    arm_file.write_text(
        "name: v-ngram\nengine: vllm\nlaunch: {python: /x/python}\n"
        "drafter:\n  method: ngram\n  num_draft_tokens: 3\n  num_draft_tokens: 5\n"
        "baseline: v-base\n"
    )
    data["arms"][1] = {"file": "arm.yaml"}
    code, _, err = run_cli(capsys, "validate", str(write(tmp_path, data)))
    assert code == 2
    line = _one_error_line(err)
    assert line.startswith(
        f"specbench: {arm_file}:7: arms[1].drafter.num_draft_tokens: "
        "duplicate key 'num_draft_tokens'"
    ), line
    assert "first at line 6" in line


def test_merge_keys_and_aliases_are_not_duplicates(tmp_path, capsys):
    # `<<: *anchor` with an overriding key beside it, as the scripted examples write it.
    for example in ("scripted-pass.yaml", "cpu.yaml"):
        code, _, err = run_cli(capsys, "validate", str(ROOT / "examples" / example))
        assert code == 0, err
    text = (ROOT / "examples" / "scripted-pass.yaml").read_text()
    assert "<<: *engine" in text and "num_draft_tokens: 4" in text


def test_duplicate_keys_in_a_real_process_print_one_line(tmp_path):
    study = write(tmp_path, BASE)
    study.write_text(study.read_text() + DUPLICATE_LOADS)
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(study)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert _one_error_line(proc.stderr).count("duplicate key 'loads'") == 1


def eagle_study(tmp_path: Path, verifier: str, **drafter) -> Path:
    """BASE with an EAGLE-3 arm whose local checkpoint's config names `verifier`."""
    head = tmp_path / "head"
    head.mkdir(exist_ok=True)
    (head / "config.json").write_text(
        json.dumps(
            {
                "speculators_model_type": "eagle3",
                "speculators_config": {"verifier": {"name_or_path": verifier}},
            }
        )
    )
    data = copy.deepcopy(BASE)
    data["model"] = {"id": "Qwen/Qwen3-8B-FP8", "revision": "a" * 40, "params_billion": 8}
    data["arms"].append(
        {
            "name": "v-eagle3",
            "engine": "vllm",
            "launch": {"python": "/x/python"},
            "baseline": "v-base",
            "drafter": {"method": "eagle3", "model": str(head), "num_draft_tokens": 3, **drafter},
        }
    )
    return write(tmp_path, data)


def test_a_drafter_trained_against_another_base_fails_validate_naming_both(tmp_path, capsys):
    code, out, err = run_cli(capsys, "validate", str(eagle_study(tmp_path, "Qwen/Qwen3-8B")))
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.startswith("specbench: ")]
    assert re.match(
        r"specbench: \S+study\.yaml:\d+: arms\[3\]\.drafter\.model: arm 'v-eagle3':"
        r" its checkpoint was trained against 'Qwen/Qwen3-8B' \(config\.json"
        r" speculators_config\.verifier\.name_or_path\), but model\.id is"
        r" 'Qwen/Qwen3-8B-FP8'",
        line,
    ), line
    assert "seal:" not in out
    # Registered on purpose: validate accepts it and says what it was checked against.
    code, out, _ = run_cli(
        capsys,
        "validate",
        str(eagle_study(tmp_path, "Qwen/Qwen3-8B", trained_against="Qwen/Qwen3-8B")),
    )
    assert code == 0
    assert (
        "v-eagle3: trained against 'Qwen/Qwen3-8B' (speculators_config.verifier.name_or_path):"
        " matches drafter.trained_against 'Qwen/Qwen3-8B'"
    ) in out
    # A head trained against the registered target passes as it is.
    code, out, _ = run_cli(capsys, "validate", str(eagle_study(tmp_path, "Qwen/Qwen3-8B-FP8")))
    assert code == 0 and "matches model.id 'Qwen/Qwen3-8B-FP8'" in out


def test_a_fetched_drafter_is_checked_in_the_hub_cache(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "hub"
    commit = "b" * 40
    repo = cache / "models--org--eagle3-head"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text(
        json.dumps({"speculators_config": {"verifier": {"name_or_path": "Qwen/Qwen3-8B"}}})
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    path = eagle_study(tmp_path, "unused")
    data = yaml.safe_load(path.read_text())
    data["arms"][3]["drafter"]["model"] = "org/eagle3-head"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code == 2
    assert "trained against 'Qwen/Qwen3-8B'" in err and "'Qwen/Qwen3-8B-FP8'" in err
    # Not fetched: said, not refused.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 0
    assert (
        "v-eagle3: drafter checkpoint not on disk here: its base is checked after `specbench fetch`"
    ) in out


# --- sessions: the defaults are the registered design; fewer are said --------------------


def test_a_study_that_says_nothing_of_sessions_gets_the_registered_design(tmp_path, capsys):
    study = load_study(write(tmp_path, BASE))
    assert (study.recording.sessions, study.recording.sessions_for) == (3, "speed_cells")
    code, out, _ = run_cli(capsys, "validate", str(write(tmp_path, BASE)))
    assert code == 0 and "warning:" not in out


@pytest.mark.parametrize(
    "recording, said",
    [
        (
            {"sessions": 1},
            "recording.sessions: 1: every speedup interval is one session's and"
            " leaves out the session-to-session variation: it covered 0.",
        ),
        (
            {"sessions": 3, "sessions_for": "pass_cells"},
            "recording.sessions_for: pass_cells: c=8 are measured in one session, their intervals"
            " (the knee's, where speculation pays) covering 0.",
        ),
    ],
)
def test_fewer_sessions_are_warned_of_with_the_coverage_they_give(
    tmp_path, capsys, recording, said
):
    data = copy.deepcopy(BASE) | {"recording": recording}
    code, out, _ = run_cli(capsys, "validate", str(write(tmp_path, data)))
    assert code == 0
    (line,) = [ln for ln in out.splitlines() if ln.startswith("warning: ")]
    assert line.startswith(f"warning: {said}"), line
    assert "benchmarks/interval_coverage.py" in line
    assert main(["validate", str(write(tmp_path, data)), "--format", "json"]) == 0
    (warning,) = json.loads(capsys.readouterr().out)["warnings"]
    assert warning == line.removeprefix("warning: ")
