"""Where speculation stops paying, and the engine setting that would gate it there."""

from __future__ import annotations

import pandas as pd

from harness.analysis.pays import speculation_pays
from harness.prereg.schema import Study
from tests.analysis.runfolder import LEVELS, study_dict


def rows(arm: str, lower: dict[int, float | None]) -> list[dict]:
    return [{"arm": arm, "task": "chat", "concurrency": c,
             "status": "ok" if lo is not None else "invalid", "ci_lower": lo}
            for c, lo in lower.items()]


def test_the_highest_level_whose_interval_stays_above_one_with_its_gate():
    study = Study.model_validate(study_dict())
    sp = pd.DataFrame(
        rows("vllm-eagle3", {1: 2.1, 2: 1.8, 4: 1.2, 8: 0.97, 16: 1.05})  # 16 does not count
        + rows("sglang-dflash", {1: 2.5, 2: 2.2, 4: 1.9, 8: 1.1, 16: 0.9})
        + rows("vllm-ngram", {1: 0.95, 2: 0.9, 4: 0.9, 8: 0.9, 16: 0.9}))
    got = {r["arm"]: r for r in speculation_pays(study, sp)}
    e = got["vllm-eagle3"]
    assert (e["pays_up_to"], e["status"], e["first_level_not_paying"]) == (4, "stops", 8)
    assert e["label"] == "pays up to 4 users; at 8 the speedup's interval reaches 1.0"
    assert e["gate"] == ('vLLM 0.32 --speculative-config: "num_speculative_tokens_per_batch_size":'
                         ' [[1, 4, 3], [5, <max_num_seqs>, 0]] (no drafts above 4 running'
                         ' requests; ignored with data parallelism)')
    d = got["sglang-dflash"]
    assert (d["pays_up_to"], d["status"]) == (8, "stops")
    assert d["gate"].startswith("SGLang 0.5.23: no batch-size switch-off for speculation")
    n = got["vllm-ngram"]
    assert (n["pays_up_to"], n["status"]) == (None, "never")
    assert n["label"] == "never pays: at 1 users the interval already reaches 1.0"


def test_a_gain_left_at_the_top_is_a_bound_and_a_missing_cell_leaves_it_open():
    study = Study.model_validate(study_dict())
    top = speculation_pays(study, pd.DataFrame(rows("vllm-eagle3", {c: 1.5 for c in LEVELS})))
    assert (top[0]["status"], top[0]["pays_up_to"], top[0]["gate"]) == (
        "pays_at_every_level", 16, None)
    hole = speculation_pays(study, pd.DataFrame(
        rows("vllm-eagle3", {1: 1.5, 2: None, 4: 1.2, 8: 1.1, 16: 1.1})))
    assert (hole[0]["status"], hole[0]["pays_up_to"], hole[0]["first_level_not_paying"]) == (
        "pays_then_unknown", 1, 2)
