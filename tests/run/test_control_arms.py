"""Control arms with synthetic acceptance (issue 32, part 1): the engine keeps an arm's
drafts by a registered chance whatever they say, so the arm measures what a round costs
at a known acceptance. Its text is not the target's: it gets no identity or accuracy
cells, the smoke does not compare it, and no bar reads it, however fast it runs."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from harness.cli import main
from harness.engines import get_engine_kind
from harness.engines.launch.base import expand_study_leaving_unset
from harness.engines.launch.command_line import invocation
from harness.engines.launch.scripted import conditional_rates
from harness.engines.launch.vllm_engine import speculative_config
from harness.plan import plan_cells
from harness.prereg import load_study
from harness.prereg.schema import Study, SyntheticAcceptance
from tests.run.conftest import (
    SCRIPTED_ENGINE,
    pdf_text,
    run_folder,
    scripted_arms,
    scripted_bars,
    scripted_recording,
    verdict_of,
    write_scripted_study,
)

ROOT = Path(__file__).resolve().parents[2]
PREREG = ROOT / "prereg.yaml"
ENGINE = SCRIPTED_ENGINE


def control_study(folder: Path, synthetic: dict | None = None) -> Path:
    """A baseline, a real drafter (~2 tokens a round) and a control arm kept at 3.5 tokens a
    round (k = 3: every round keeps two drafts, half of them a third), so the control arm
    is the fastest: a bar that read it would pick it."""
    return write_scripted_study(
        folder,
        "control",
        "A control arm beside a real drafter",
        arms=[
            *scripted_arms([0.6, 0.5, 0.4], accept_draws="even"),
            {
                "name": "control",
                "engine": "scripted",
                "launch": {},
                "baseline": "base",
                "drafter": {
                    "method": "scripted-draft",
                    "num_draft_tokens": 3,
                    "synthetic": synthetic or {"acceptance_length": 3.5},
                },
                # The declared drafter's own acceptance, which the synthetic mode overrides.
                "scripted": {
                    **ENGINE,
                    "num_draft_tokens": 3,
                    "accept_probs": [0.1, 0.1, 0.1],
                    "accept_draws": "even",
                },
            },
        ],
        loads={
            "closed_loop": {
                "concurrency": [1, 2],
                "requests": {"min": 8, "per_user": 2},
                "warmup_per_user": 1,
                "stagger_warmup": True,
            }
        },
        tasks=[
            {
                "name": "chat",
                "kind": "chat",
                "uses": ["speed", "identity"],
                "max_tokens": 32,
                "subset": 16,
                "identity_items": 4,
            },
            {"name": "gsm8k", "kind": "gsm8k", "uses": ["accuracy"], "max_tokens": 16, "subset": 4},
        ],
        recording=scripted_recording(smoke=True, accuracy_concurrency=4),
        bars=scripted_bars(accuracy={"tasks": ["gsm8k"]}),
    )


def test_a_control_arm_is_measured_and_never_judged(tmp_path, capsys):
    study_path = control_study(tmp_path)
    study = load_study(study_path)
    cells = {c.id for c in plan_cells(study)}
    assert {"control/chat/speed/c001", "control/chat/speed/c002"} <= cells
    assert not any(
        c.startswith("control/") and ("identity" in c or "accuracy" in c) for c in cells
    ), sorted(cells)
    assert {"drafter/chat/identity", "drafter/gsm8k/accuracy"} <= cells

    assert main(["plan", str(study_path)]) == 0
    planned = capsys.readouterr().out
    assert (
        "control arm control (scripted-draft, k=3, synthetic acceptance length 3.5): a control arm"
    ) in " ".join(planned.split())

    results = tmp_path / "results"
    code = main(
        ["run", str(study_path), "--results", str(results), "--reports", str(tmp_path / "reports")]
    )
    out, err = capsys.readouterr()
    assert code == 0, (out + err)[-4000:]
    run = run_folder(results)
    verdict = verdict_of(run)
    manifest = json.loads((run / "manifest.json").read_text())
    (control,) = manifest["control_arms"]
    assert control["arm"] == "control" and control["tokens_per_round"] == 3.5
    assert control["synthetic"] == {"acceptance_length": 3.5}
    assert verdict["control_arms"] == manifest["control_arms"]
    setting = manifest["engines"]["control"][0]["settings"]["acceptance"]
    assert setting.startswith("control arm: synthetic acceptance length 3.5"), setting

    # Measured: the engine's own tokens a round are the registered 3.5 (within 5 %), and
    # it is the fastest drafter arm at every level.
    sp = pd.read_csv(run / "speedups.csv").set_index(["arm", "concurrency"])
    for c in (1, 2):
        assert sp.loc[("control", c), "status"] == "ok"
        engine_tpr = sp.loc[("control", c), "engine_tokens_per_round"]
        assert abs(engine_tpr - 3.5) <= 0.05 * 3.5, engine_tpr
        assert sp.loc[("control", c), "speedup"] > sp.loc[("drafter", c), "speedup"] * 1.2

    # Judged: the real drafter alone, on every bar.
    assert verdict["verdict"] == "PASS", json.dumps(verdict, indent=1)[:3000]
    bars = {b["name"]: b for b in verdict["bars"]}
    chat = bars["pass.speed"]["evidence"]["tasks"]["chat"]
    assert chat["best_drafter"] == "drafter" and set(chat["minima"]) == {"drafter"}, chat
    stop = json.dumps(bars["stop"]["evidence"])
    assert "control" not in stop, stop
    for name in ("pass.identity", "pass.accuracy"):
        assert "control" not in json.dumps(bars[name]["evidence"]), name
    # No identity or accuracy cell was measured for it, and the smoke compared the real
    # drafter's text alone (the control arm's differs: drafts kept whatever they say).
    measured = {
        json.loads(p.read_text())["cell"]["id"] for p in (run / "cells").glob("*/cell.json")
    }
    assert not any(
        c.startswith("control/") and not c.startswith("control/chat/speed") for c in measured
    ), sorted(measured)
    smoke = [json.loads(ln) for ln in (run / "smoke" / "arms.jsonl").read_text().splitlines()]
    compared = {r["arm"] for r in smoke if r["kind"] != "arm"}
    assert compared == {"drafter"}, smoke
    (own,) = [r for r in smoke if r["kind"] == "arm" and r["arm"] == "control"]
    assert own["status"] == "passed" and own["counter"]["moved"]

    # The report names it beside the bars.
    pdf = tmp_path / "reports" / f"{run.name}.pdf"
    text = pdf_text(pdf)
    assert "Control arms (synthetic acceptance; never judged):" in text


@pytest.mark.parametrize(
    "synthetic, k, message",
    [
        ({"acceptance_length": 2.5, "rates": [1, 0.5, 0]}, 3, "exactly one of acceptance_length"),
        ({}, 3, "exactly one of acceptance_length"),
        ({"acceptance_length": 4.5}, 3, r"above k \+ 1 = 4"),
        ({"rates": [1.0, 0.5]}, 3, "needs 3 entries"),
        ({"rates": [0.5, 0.6, 0.2]}, 3, "must not increase"),
        ({"acceptance_length": 0.5}, 3, "greater than or equal to 1"),
    ],
)
def test_a_synthetic_setting_is_checked_on_load(tmp_path, synthetic, k, message):
    data = yaml.safe_load(control_study(tmp_path).read_text())
    data["arms"][2]["drafter"] = {
        "method": "scripted-draft",
        "num_draft_tokens": k,
        "synthetic": synthetic,
    }
    with pytest.raises(ValueError, match=message):
        Study.model_validate(data)


def test_a_control_arm_has_no_acceptance_floor_and_is_launched(tmp_path):
    data = yaml.safe_load(control_study(tmp_path).read_text())
    data["arms"][2]["drafter"]["expect"] = {"acceptance_length_min": 2}
    with pytest.raises(ValueError, match="a synthetic one's is set"):
        Study.model_validate(data)
    data = yaml.safe_load(control_study(tmp_path).read_text())
    arm = data["arms"][2]
    del arm["launch"]
    arm["attach"] = {"base_url": "http://127.0.0.1:9", "metrics": "vllm", "served_model": "x"}
    with pytest.raises(ValueError, match="an attached engine's acceptance is not ours"):
        Study.model_validate(data)


def test_vllm_on_a_gpu_carries_it_in_its_speculative_config():
    study, unset = expand_study_leaving_unset(
        load_study(PREREG),
        {
            "SPECBENCH_VLLM_PYTHON": "/envs/vllm/bin/python",
            "SPECBENCH_SGLANG_PYTHON": "/envs/sglang/bin/python",
        },
    )
    eagle = study.arm("vllm-eagle3")
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"acceptance_length": 2.5}, {"synthetic_acceptance_length": 2.5}),
        ({"rates": [0.9, 0.6, 0.3]}, {"synthetic_acceptance_rates": [0.9, 0.6, 0.3]}),
    ]
    for synthetic, fields in cases:
        assert eagle.drafter is not None
        drafter = eagle.drafter.model_copy(
            update={"synthetic": SyntheticAcceptance.model_validate(synthetic)}
        )
        control = eagle.model_copy(update={"name": "control", "drafter": drafter})
        assert get_engine_kind("vllm").synthetic_problem(control) is None
        config = speculative_config(control)
        assert config is not None
        assert {k: config[k] for k in ("rejection_sample_method", *fields)} == {
            "rejection_sample_method": "synthetic",
            **fields,
        }
        argv = invocation(control, study, 8000, unset).argv
        shown = json.loads(argv[argv.index("--speculative-config") + 1])
        assert shown == config


def test_sglang_carries_a_length_in_its_environment_and_refuses_rates():
    study, unset = expand_study_leaving_unset(
        load_study(PREREG),
        {
            "SPECBENCH_VLLM_PYTHON": "/envs/vllm/bin/python",
            "SPECBENCH_SGLANG_PYTHON": "/envs/sglang/bin/python",
        },
    )
    dflash = study.arm("sglang-dflash")
    kind = get_engine_kind("sglang")
    assert dflash.drafter is not None
    drafter = dflash.drafter.model_copy(
        update={"synthetic": SyntheticAcceptance(acceptance_length=6.5)}
    )
    control = dflash.model_copy(update={"name": "control", "drafter": drafter})
    shown = invocation(control, study, 8000, unset)
    assert shown.env == {
        "SGLANG_SIMULATE_ACC_LEN": "6.5",
        "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
        "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token",
    }
    assert shlex.split(shown.line())[0] == "SGLANG_SIMULATE_ACC_LEN=6.5"
    rates = drafter.model_copy(update={"synthetic": SyntheticAcceptance(rates=[0.5] * 16)})
    problem = kind.synthetic_problem(control.model_copy(update={"drafter": rates}))
    assert problem is not None and "mean acceptance length only" in problem


def test_a_dflash_synthetic_length_above_its_block_is_refused_on_load_and_in_a_surface():
    # SGLang 0.5.23 clamps a DFLASH synthetic length to the block size k (dflash_utils.py
    # 872-875: [1, block_size]), not k + 1 as for the EAGLE family: 17 at k = 16 would
    # run as 16.
    data = yaml.safe_load(PREREG.read_text())
    data["arms"] = [yaml.safe_load((ROOT / a["file"]).read_text()) for a in data["arms"]]
    dflash = data["arms"][1]
    control = {
        **dflash,
        "name": "control",
        "drafter": {**dflash["drafter"], "synthetic": {"acceptance_length": 17}},
    }
    with pytest.raises(
        ValueError,
        match=r"above the DFLASH block size k = 16: SGLang 0.5.23"
        r" clamps it to the block",
    ):
        Study.model_validate({**data, "arms": [*data["arms"], control]})
    control["drafter"]["synthetic"] = {"acceptance_length": 16}
    Study.model_validate({**data, "arms": [*data["arms"], control]})
    # A surface over the DFLASH arm: L = 9 at k = 8 is k + 1, which DFLASH cannot set.
    surface = {
        "drafter": "sglang-dflash",
        "k": [8, 16],
        "acceptance_length": [2, 9],
        "concurrency": [1],
    }
    with pytest.raises(
        ValueError,
        match=r"arm 'surface-k8-L9': synthetic.acceptance_length 9"
        r" is above the DFLASH block size k = 8",
    ):
        Study.model_validate({**data, "surface": surface})
    Study.model_validate({**data, "surface": {**surface, "acceptance_length": [2, 8]}})


def test_the_cpu_build_refuses_it_with_one_line(tmp_path):
    text = (ROOT / "examples" / "cpu.yaml").read_text(encoding="utf-8")
    text = text.replace(
        "num_draft_tokens: 3,\n", "num_draft_tokens: 3, synthetic: {acceptance_length: 2.5},\n", 1
    )
    assert "synthetic" in text
    path = tmp_path / "cpu.yaml"
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={
            "SPECBENCH_TINY_PAIR": "/models/pair",
            "SPECBENCH_VLLM_CPU_PYTHON": "/venv/bin/python",
            "PATH": "/usr/bin:/bin",
        },
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "drafter.synthetic" in ln]
    assert "vLLM 0.32's CPU build has no synthetic acceptance" in line
    arm_line = text.splitlines().index("  - name: cpu-draft") + 1  # where the arm is written
    assert line.startswith(f"specbench: {path}:{arm_line}: arms[1]: drafter.synthetic: "), line


def test_the_scripted_engine_keeps_drafts_by_vllms_conditional_rates():
    assert conditional_rates([1.0, 0.5, 0.0]) == [1.0, 0.5, 0.0]
    assert conditional_rates([0.8, 0.4, 0.1]) == pytest.approx([0.8, 0.5, 0.25])
    assert conditional_rates([0.0, 0.0]) == [0.0, 0.0]
    syn = SyntheticAcceptance(acceptance_length=2.5)
    assert syn.unconditional_rates(3) == [1.0, 0.5, 0.0]  # vLLM's minimum-variance schedule
    assert syn.tokens_per_round(3) == 2.5
    assert SyntheticAcceptance(acceptance_length=4).unconditional_rates(3) == [1.0, 1.0, 1.0]
    assert SyntheticAcceptance(rates=[0.8, 0.4, 0.1]).tokens_per_round(3) == pytest.approx(2.3)
