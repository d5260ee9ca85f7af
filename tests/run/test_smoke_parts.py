"""The smoke stage's parts: its order, its keys, the checks on both engines' counter
names, the engine log's relevant line, and what the plan counts for it."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, cast

import pytest
import yaml
from rich.console import Console

from harness.analysis.smoke import smoke_line
from harness.cli import main
from harness.engines.running.engine_log import relevant_log_line
from harness.engines.running.engine_process import EngineProcess
from harness.errors import InputError, SpecbenchError
from harness.plan import estimate, plan_cells
from harness.prereg import load_study, load_study_file
from harness.records import SmokeAnswer, SmokeArmCheck, SmokeIdentityCheck, TokenLogprob
from harness.run import smoke_speculation
from harness.run.arm_engine import ArmEngine
from harness.run.progress import RunProgress
from harness.run.runner import new_run
from harness.run.smoke import SmokeFailed, SmokeStage
from harness.run.smoke_identity import compare_answers
from harness.run.smoke_plan import (
    passed_checks,
    smoke_key,
    smoke_order,
    smoke_records,
    smoke_requests,
)
from harness.run.smoke_speculation import counter_check
from harness.testengine.server import serve_in_thread
from tests.run.test_remeasure import study_file

ROOT = Path(__file__).resolve().parents[2]
FAST: dict[str, Any] = {"weight_bytes": 1e9, "bandwidth_bytes_per_s": 1e12}


# --- the engine log's line -----------------------------------------------------------


def test_the_relevant_log_line_is_the_error_then_a_warning_then_the_last_that_is_not_access():
    error = [
        "INFO starting",
        "Traceback (most recent call last):",
        '  File "x.py", line 1',
        "ValueError: Unknown speculative algorithm name: FOO",
        "INFO shutting down",
    ]
    assert relevant_log_line(error) == "ValueError: Unknown speculative algorithm name: FOO"
    warned = [
        "INFO a",
        "WARNING 12-02 [loggers.py:1] spec decode is off",
        "INFO b",
        'INFO:     127.0.0.1:5555 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    ]
    assert relevant_log_line(warned) == "WARNING 12-02 [loggers.py:1] spec decode is off"
    access = [
        "INFO Engine 000: Avg generation throughput: 10.0 tokens/s",
        'INFO:     127.0.0.1:5555 - "GET /metrics HTTP/1.1" 200 OK',
        "",
    ]
    assert relevant_log_line(access) == "INFO Engine 000: Avg generation throughput: 10.0 tokens/s"
    assert relevant_log_line([]) is None and relevant_log_line(["", "  "]) is None


# --- order and keys --------------------------------------------------------------------


def test_baselines_first_then_drafters_and_the_first_cells_arm_last():
    study = load_study(ROOT / "prereg.yaml")
    names = [a.name for a in study.arms]
    assert names == ["vllm-base", "sglang-dflash", "sglang-base", "vllm-eagle3", "vllm-ngram"]
    first = plan_cells(study)[0].arm
    assert first == "vllm-base"
    assert smoke_order(study, names, first) == [
        "sglang-base",
        "sglang-dflash",
        "vllm-eagle3",
        "vllm-ngram",
        "vllm-base",
    ]
    # A resume smokes only what it must; the first cell's arm is last only if it is one.
    assert smoke_order(study, ["vllm-ngram", "sglang-base"], "vllm-base") == [
        "sglang-base",
        "vllm-ngram",
    ]
    assert smoke_order(study, ["vllm-ngram", "vllm-base"], "vllm-ngram") == [
        "vllm-base",
        "vllm-ngram",
    ]


def test_a_key_changes_with_its_arm_and_a_drafters_with_its_baseline(tmp_path):
    study = load_study_file(study_file(tmp_path, recording={"smoke": True})).study
    requests = smoke_requests(study)
    assert len(requests) == 2 and all(
        r.max_tokens == study.task("chat").max_tokens for r in requests
    )
    keys = {a.name: smoke_key(study, a.name, requests) for a in study.arms}
    changed_base = load_study_file(
        study_file(tmp_path, base={"seed": 99}, recording={"smoke": True})
    ).study
    again = {a.name: smoke_key(changed_base, a.name, requests) for a in changed_base.arms}
    assert again["base"] != keys["base"] and again["drafter"] != keys["drafter"]
    changed_drafter = load_study_file(
        study_file(tmp_path, drafter={"seed": 99}, recording={"smoke": True})
    ).study
    again = {a.name: smoke_key(changed_drafter, a.name, requests) for a in changed_drafter.arms}
    assert again["base"] == keys["base"] and again["drafter"] != keys["drafter"]
    assert smoke_key(study, "base", requests[:1]) != keys["base"]  # other prompts


def test_a_damaged_smoke_record_is_one_line_naming_file_line_and_field(tmp_path):
    folder = tmp_path / "smoke"
    folder.mkdir()
    good = _check("base", "k1", "passed").model_dump_json()
    (folder / "arms.jsonl").write_text(good + "\n" + good.replace('"passed"', '"maybe"') + "\n")
    with pytest.raises(InputError) as err:
        smoke_records(tmp_path)
    assert err.value.exit_code == 2 and len(err.value.lines) == 1
    assert err.value.lines[0].startswith(f"{folder / 'arms.jsonl'}: line 2: field arm.status: ")


def _check(arm: str, key: str, status: Literal["passed", "failed"]) -> SmokeArmCheck:
    return SmokeArmCheck(
        arm=arm, key=key, attempt=1, started_wall=0, ended_wall=1, engine="started", status=status
    )


def test_only_the_latest_check_under_the_current_key_counts():
    records = [
        _check("base", "k1", "passed"),
        _check("drafter", "k2", "passed"),
        SmokeIdentityCheck(
            arm="drafter", baseline="base", key="k2", wall=1, status="passed", compared=2
        ),
        _check("base", "k1", "failed"),
    ]
    own, compared = passed_checks(records, {"base": "k1", "drafter": "k2"})
    assert set(own) == {"drafter"} and compared == {"drafter"}  # base failed last
    own, compared = passed_checks(records, {"base": "k1", "drafter": "changed"})
    assert own == {} and compared == set()


def test_compare_answers_names_the_first_difference_and_skips_unanswered_items():
    same = [
        SmokeAnswer(item_id="a", ok=True, output_text=" x y z"),
        SmokeAnswer(item_id="b", ok=False, error="HTTP 503"),
    ]
    check = compare_answers(
        "d",
        "b0",
        "k",
        same,
        [
            SmokeAnswer(item_id="a", ok=True, output_text=" x y z"),
            SmokeAnswer(item_id="b", ok=True, output_text=" q"),
        ],
    )
    assert (check.status, check.compared) == ("passed", 1)
    check = compare_answers(
        "d",
        "b0",
        "k",
        [SmokeAnswer(item_id="a", ok=True, output_text=" x y w")],
        [SmokeAnswer(item_id="a", ok=True, output_text=" x y z")],
    )
    assert (check.status, check.item_id, check.char_index) == ("failed", "a", 5)
    assert check.reason == (
        "arm 'd': its greedy output differs from its baseline 'b0' on item a"
        " at character 5: ' x y w' vs ' x y z' -- unknown: the engine sent"
        " no logprobs for the drafter and baseline"
    )
    assert check.divergence is not None
    assert check.divergence.kind == "unknown" and check.divergence.token_index is None


def _scored(
    words: list[str], margins: dict[int, tuple[str, float]] | None = None, margin: float = 5.0
) -> list[TokenLogprob]:
    """Tokens with the target's top two: the token itself first by `margin`, or at index
    i the pair (other, m): `other` ranked second by m (or first, when m < 0: a flip)."""
    out = []
    for i, w in enumerate(words):
        other, m = (margins or {}).get(i, (" zz", margin))
        pair = [(w, -0.1), (other, -0.1 - m)] if m >= 0 else [(other, -0.1), (w, -0.1 + m)]
        out.append(TokenLogprob(token=w, logprob=dict(pair)[w], top=list(pair)))
    return out


def _answer(item: str, words: list[str], scored: list[TokenLogprob] | None) -> SmokeAnswer:
    return SmokeAnswer(item_id=item, ok=True, output_text="".join(words), token_logprobs=scored)


def test_a_near_tie_divergence_is_recorded_and_the_smoke_goes_on():
    base = [" x", " y", " z"]
    flipped = [" x", " w", " z"]
    # The target's top two at token 1 are " y" and " w", 0.05 nats apart; the drafter's
    # own kernels ranked them the other way.
    theirs = _answer("a", base, _scored(base, {1: (" w", 0.05)}))
    mine = _answer("a", flipped, _scored(flipped, {1: (" y", 0.03)}))
    check = compare_answers("d", "b0", "k", [mine], [theirs], near_tie_margin=0.5)
    assert (check.status, check.compared, check.divergence) == ("passed", 1, None)
    (tie,) = check.near_ties
    assert (tie.item_id, tie.token_index, tie.drafter_token, tie.baseline_token, tie.kind) == (
        "a",
        1,
        " w",
        " y",
        "numeric",
    )
    assert tie.drafter_margin == pytest.approx(0.03) and tie.baseline_margin == pytest.approx(0.05)
    line = smoke_line(check)
    assert "near-tie" in line and "token 1 ' w' vs ' y' (margins 0.03, 0.05)" in line


def test_a_real_divergence_stops_the_smoke_naming_the_token_and_margins():
    base = [" x", " y", " z"]
    bad = [" x", " w", " z"]
    # The target preferred " y" by 4 nats on both sides: the drafter arm kept a token
    # its own target ranked second (a verification bug), not numerics.
    theirs = _answer("a", base, _scored(base, {1: (" w", 4.0)}))
    mine = _answer(
        "a",
        bad,
        [
            *_scored([" x"]),
            TokenLogprob(token=" w", logprob=-4.1, top=[(" y", -0.1), (" w", -4.1)]),
            *_scored([" z"]),
        ],
    )
    check = compare_answers("d", "b0", "k", [mine], [theirs], near_tie_margin=0.5)
    assert check.status == "failed" and check.near_ties == []
    assert check.divergence is not None
    assert (check.divergence.kind, check.divergence.token_index) == ("real", 1)
    assert check.reason is not None
    assert (
        "on item a at token 1 ' w' vs ' y' (the target's margin 4 drafter, 4 baseline;"
        " a near-tie is below 0.5), character 3"
    ) in check.reason
    # A near-tie between two other tokens does not excuse a token the target ranked lower.
    odd = [
        TokenLogprob(token=" x", logprob=-0.1, top=[(" x", -0.1), (" q", -5.1)]),
        TokenLogprob(token=" w", logprob=-6.0, top=[(" y", -0.1), (" v", -0.15)]),
        *_scored([" z"]),
    ]
    check = compare_answers("d", "b0", "k", [_answer("a", bad, odd)], [theirs], near_tie_margin=0.5)
    assert check.divergence is not None
    assert check.status == "failed" and check.divergence.kind == "real"
    assert check.reason is not None
    assert "not the target's top two" in check.reason


# --- the checks, against scripted engines in this process ------------------------------


class StubArmEngine:
    """What the smoke needs of the runner's ArmEngine, around an in-thread scripted engine."""

    def __init__(self, url: str | None, dialect: str, fail: str | None = None) -> None:
        self.url, self.dialect, self.fail = url, dialect, fail

    def running(self) -> bool:
        return False

    def ensure(self, started_for: str = ""):
        assert started_for == "smoke"
        if self.fail:
            raise SpecbenchError(self.fail, "command: ...", "last 40 lines of the log:")
        assert self.url is not None
        # A ServingEngine in this thread: no process group of its own, as if attached.
        return SimpleNamespace(
            base_url=self.url,
            metrics_url=self.url + "/metrics",
            served_model="scripted",
            metrics_dialect=self.dialect,
            pgid=None,
        )


def run_smoke(
    tmp_path: Path,
    dialect: str,
    drafter: dict,
    fail: str | None = None,
    registration: dict | None = None,
    allow_deviation: bool = False,
):
    """registration: fields over the drafter arm's `drafter` entry."""
    spec_changes = {"metrics_dialect": dialect, **FAST}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = study_file(
        tmp_path, base=spec_changes, drafter={**spec_changes, **drafter}, recording={"smoke": True}
    )
    if registration:
        data = yaml.safe_load(path.read_text())
        next(a for a in data["arms"] if a["name"] == "drafter")["drafter"].update(registration)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    loaded = load_study_file(path)
    store = new_run(loaded, tmp_path / "results")
    specs = {a.name: a.scripted for a in loaded.study.arms if a.scripted is not None}
    said = io.StringIO()
    console = Console(file=said, width=300)
    with (
        serve_in_thread(specs["base"]) as base,
        serve_in_thread(specs["drafter"]) as draft,
        RunProgress(console, 0) as progress,
    ):
        engines = {
            "base": StubArmEngine(base.base_url, dialect),
            "drafter": StubArmEngine(draft.base_url, dialect, fail),
        }
        # The stubs stand in for ArmEngine (what the smoke asks of it).
        stage = SmokeStage(
            store,
            loaded.study,
            progress,
            lambda name: cast(ArmEngine, engines[name]),
            allow_deviation=allow_deviation,
        )
        try:
            stage.run("base")
            error = None
        except SmokeFailed as err:
            error = err
    return store, error, said.getvalue()


@pytest.mark.parametrize(
    "dialect,counter",
    [("vllm", "vllm:spec_decode_num_drafts_total"), ("sglang", "sglang:spec_verify_calls_total")],
)
def test_a_drafter_passes_when_its_counter_moves_and_fails_naming_it_when_not(
    tmp_path, monkeypatch, dialect, counter
):
    monkeypatch.setattr(
        smoke_speculation, "COUNTER_WAIT_S", 1.0
    )  # a frozen counter is waited on this long
    store, error, said = run_smoke(tmp_path / "ok", dialect, {})
    assert error is None, error
    records = smoke_records(store.root)
    drafter = next(r for r in records if r.kind == "arm" and r.arm == "drafter")
    assert drafter.counter is not None
    assert drafter.counter.name == counter and drafter.counter.moved
    assert drafter.counter.after is not None
    assert drafter.counter.after > (drafter.counter.before or 0)
    assert f"{counter} " in said and "smoke passed: 2 arms" in said

    store, error, _ = run_smoke(tmp_path / "frozen", dialect, {"frozen_spec_counters": True})
    assert error is not None and error.lines[0].startswith(
        f"smoke: arm 'drafter': its speculation counter {counter} did not move over 2 greedy"
        " requests (0 -> 0): the engine is not drafting | engine log: "
    )
    assert store.manifest().to_json()["smoke"]["status"] == "failed"


def test_a_drafter_below_its_floor_runs_under_allow_deviation_and_the_deviation_is_kept(tmp_path):
    stale = {"accept_probs": [0.07, 0.5, 0.5, 0.5]}
    floor = {"expect": {"acceptance_length_min": 2.0}}
    store, error, said = run_smoke(
        tmp_path / "allowed", "sglang", stale, registration=floor, allow_deviation=True
    )
    assert error is None, error
    drafter = next(r for r in smoke_records(store.root) if r.kind == "arm" and r.arm == "drafter")
    assert drafter.status == "passed"
    assert drafter.acceptance is not None
    assert drafter.acceptance.below and drafter.acceptance.allowed
    assert drafter.acceptance.tokens_per_round is not None
    assert drafter.acceptance.floor == 2.0 and drafter.acceptance.tokens_per_round < 1.5
    (deviation,) = store.manifest().to_json()["deviations"]
    assert deviation["arm"] == "drafter" and "below its drafter.expect" in deviation["reason"]
    assert "deviation recorded" in said
    # A drafter above its floor passes with its figure recorded, no deviation.
    store, error, _ = run_smoke(
        tmp_path / "fine", "vllm", {}, registration={"expect": {"acceptance_length_min": 2.0}}
    )
    assert error is None, error
    drafter = next(r for r in smoke_records(store.root) if r.kind == "arm" and r.arm == "drafter")
    assert drafter.acceptance is not None
    assert drafter.acceptance.tokens_per_round is not None
    assert not drafter.acceptance.below and drafter.acceptance.tokens_per_round > 2.0
    assert store.manifest().to_json()["deviations"] == []


def test_an_absent_counter_is_zero_for_sglang_and_no_counter_for_vllm(monkeypatch):
    # SGLang creates sglang:spec_verify_calls_total on the first finished request that
    # verified drafts; vLLM exports its counters from the start with a speculative config.
    monkeypatch.setattr(smoke_speculation, "COUNTER_WAIT_S", 0.6)
    scrapes: Iterator[tuple[float | None, str | None]] = iter([(None, None), (3.0, None)])
    monkeypatch.setattr(smoke_speculation, "read_drafts", lambda process: next(scrapes))
    no_process = cast(EngineProcess, None)  # read_drafts is patched: no engine is read
    counter = counter_check(no_process, "sglang", (None, None))
    assert (counter.before, counter.after, counter.moved) == (None, 3.0, True)
    scrapes = iter([(None, None)] * 5)
    counter = counter_check(no_process, "vllm", (None, None))
    assert not counter.moved and counter.name == "vllm:spec_decode_num_drafts_total"
    scrapes = iter([(None, "/metrics failed: HTTP 500")] * 5)
    counter = counter_check(no_process, "vllm", (2.0, None))
    assert not counter.moved and counter.name.endswith("(/metrics failed: HTTP 500)")


def test_an_arm_that_does_not_start_fails_the_smoke_with_the_engines_own_line(tmp_path):
    store, error, _ = run_smoke(
        tmp_path,
        "vllm",
        {},
        fail="arm 'drafter' (scripted): the engine exited with code 1 while"
        " starting; the engine says: ValueError: bad method",
    )
    assert error.lines[0].startswith(
        "smoke: arm 'drafter': did not start: arm 'drafter' (scripted): the engine exited with"
        " code 1 while starting; the engine says: ValueError: bad method"
    )
    (check,) = [r for r in smoke_records(store.root) if r.arm == "drafter"]
    assert isinstance(check, SmokeArmCheck)
    assert (check.status, check.failed_check, check.engine) == ("failed", "start", "not started")


# --- the plan ---------------------------------------------------------------------------


def test_the_plan_counts_the_smokes_engine_starts_and_says_so(tmp_path, capsys):
    study = load_study(ROOT / "prereg.yaml")
    cells = plan_cells(study)
    on = estimate(study, cells)
    off_study = study.model_copy(
        update={"recording": study.recording.model_copy(update={"smoke": False})}
    )
    off = estimate(off_study, cells)
    n_on, n_off = (
        int(m.group(1))
        for e in (on, off)
        if (m := re.search(r"(\d+) engine starts", " ".join(e.assumptions)))
    )
    assert n_on - n_off == len(study.arms) - 1  # the last smoked engine serves the first cell
    assert on.seconds - off.seconds == pytest.approx(4 * study.plan_estimate.engine_start_s)
    assert main(["plan", str(ROOT / "prereg.yaml")]) == 0
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert (
        "before stage 1 the smoke stage starts each of the 5 arms once (two greedy prompts;"
        " drafters must move their speculation counters and match their baselines), ending"
        " on vllm-base, whose engine serves the first cell."
    ) in out


def test_a_drafts_count_that_does_not_add_up_to_the_tokens_is_named():
    from harness.prereg.schema import Drafter
    from harness.records import RequestRecord, RequestSpeculation
    from harness.run.smoke_speculation import draft_count_problem

    def rec(rounds: int, accepted: int, tokens: int, finish: str = "stop") -> RequestRecord:
        return RequestRecord(
            cell_id="smoke/d",
            index=0,
            item_id="i",
            scheduled_t=0,
            sent_t=0,
            completion_tokens=tokens,
            finish_reason=finish,
            speculation=RequestSpeculation(
                engine="vllm", rounds=rounds, draft_tokens=3 * rounds, accepted=accepted
            ),
        )

    head = Drafter(method="eagle3", model="org/head", num_draft_tokens=3)
    ngram = Drafter(method="ngram", num_draft_tokens=3)
    assert draft_count_problem(rec(8, 23, 32), head) is None  # 8 + 23 + 1
    # Measured on the CPU engine, k = 3, cut at 32 tokens: 8 rounds of 24 and 9 of 24.
    assert draft_count_problem(rec(8, 24, 32, "length"), head) is None
    assert draft_count_problem(rec(9, 24, 32, "length"), head) is None
    # An engine that counts every drafted token as a round, or misses rounds: named.
    problem = draft_count_problem(rec(31, 24, 32), head)
    assert problem == (
        "item i: the engine counted 31 rounds and 24 accepted drafts (+1 for"
        " the prefill's token = 56 tokens) for a request of 32 completion tokens"
        " (finish stop): what a 'draft' counts does not match what the"
        " acceptance figures assume"
    )
    assert draft_count_problem(rec(4, 10, 32), head) is not None
    # n-gram skips steps with no match: its rounds are a lower bound (measured: 3 and 2).
    assert draft_count_problem(rec(3, 2, 32, "length"), ngram) is None
    assert draft_count_problem(rec(20, 30, 32, "length"), ngram) is not None


def test_an_engine_that_refuses_logprobs_is_told_what_to_do():
    from harness.run.smoke_identity import logprobs_hint

    assert logprobs_hint("HTTP 500: DFLASH does not support return_logprob.").startswith(
        " (the smoke and identity cells ask for logprobs, top 2"
    )
    assert "spec v2 for DFLASH" in logprobs_hint("return_logprob not supported")
    assert logprobs_hint("HTTP 503") == "" and logprobs_hint(None) == ""
