"""The scripted engine's declared model: validation and the figures it implies."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from harness.errors import InputError
from harness.testengine.spec import ScriptedEngineSpec, load_spec


def test_roofline_switches_from_memory_to_compute_bound() -> None:
    spec = ScriptedEngineSpec(
        weight_bytes=1e10,
        bandwidth_bytes_per_s=1e12,
        flops_per_token=1e10,
        flops_per_s=1e14,
        step_overhead_s=0.001,
    )
    assert spec.step_seconds(1) == pytest.approx(0.001 + 0.01)  # weights / bandwidth
    assert spec.step_seconds(1000) == pytest.approx(0.001 + 0.1)  # flops / rate
    # A prompt admitted in the step costs its flops too, unless declared cheaper.
    assert spec.step_seconds(10, prefill_tokens=990) == pytest.approx(0.001 + 0.1)
    cheap = spec.model_copy(update={"prefill_flops_per_token": 1e8})
    assert cheap.step_seconds(10, prefill_tokens=990) == pytest.approx(0.001 + 0.01)
    assert cheap.step_seconds(2000) == pytest.approx(0.001 + 0.2)


def test_acceptance_length_from_conditional_position_probabilities() -> None:
    spec = ScriptedEngineSpec(num_draft_tokens=3, accept_probs=[0.5, 0.5, 1.0])
    assert spec.position_rates() == [0.5, 0.25, 0.25]
    assert spec.expected_acceptance_length() == pytest.approx(2.0)


def test_probabilities_must_match_draft_count() -> None:
    with pytest.raises(ValidationError, match="accept_probs needs 3"):
        ScriptedEngineSpec(num_draft_tokens=3, accept_probs=[0.5])
    with pytest.raises(ValidationError, match="num_draft_tokens is 0"):
        ScriptedEngineSpec(accept_probs=[0.5])
    with pytest.raises(ValidationError):
        ScriptedEngineSpec.model_validate({"unknown_field": 1})


def test_bad_spec_file_is_a_one_line_input_error(tmp_path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"failures": [{"mode": "explode"}]}))
    with pytest.raises(InputError) as err:
        load_spec(path)
    assert len(err.value.lines) == 1
    assert str(path) in err.value.lines[0] and "failures.0.mode" in err.value.lines[0]
    path.write_text("{not json")
    with pytest.raises(InputError, match="not valid"):
        load_spec(path)
    with pytest.raises(InputError, match="cannot read"):
        load_spec(tmp_path / "missing.json")


def test_session_speed_factor_is_declared_seeded_and_slows_every_step() -> None:
    spec = ScriptedEngineSpec(session_speed_spread=0.3, session_speed_seed=6)
    # Seeded: the same factors every time, one per session, inside [0.7, 1.3].
    factors = [spec.session_speed_factor(s) for s in (1, 2, 3)]
    assert [round(f, 3) for f in factors] == [0.758, 0.874, 1.129]
    assert (
        ScriptedEngineSpec(session_speed_spread=0.3, session_speed_seed=7).session_speed_factor(1)
        != factors[0]
    )
    assert ScriptedEngineSpec().session_speed_factor(2) == 1.0  # no spread: all alike
    slow = spec.for_session(1)
    assert slow.step_seconds(1) == pytest.approx(spec.step_seconds(1) / 0.758, rel=1e-3)
    assert slow.speed_factor == pytest.approx(factors[0])


def test_the_server_takes_its_session_from_the_harness(monkeypatch) -> None:
    import argparse

    from harness.testengine.server import _session_from_environment, _spec_from_args

    monkeypatch.setenv("SPECBENCH_ENGINE_SESSION", "2")
    assert _session_from_environment() == 2
    spec = ScriptedEngineSpec(session_speed_spread=0.3, session_speed_seed=6)
    args = argparse.Namespace(
        spec_json=spec.model_dump_json(), spec=None, served_model_name=None, session=2
    )
    assert _spec_from_args(args).speed_factor == pytest.approx(0.874, abs=1e-3)
    monkeypatch.setenv("SPECBENCH_ENGINE_SESSION", "two")
    with pytest.raises(InputError, match="SPECBENCH_ENGINE_SESSION='two': expected a session"):
        _session_from_environment()
