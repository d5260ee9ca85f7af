"""Where speculation pays, where its gain is gone, and the engine setting that would gate it."""

from __future__ import annotations

import pandas as pd

from harness.analysis.pays import speculation_pays
from harness.prereg.schema import Study
from tests.analysis.runfolder import LEVELS, study_dict


def rows(arm: str, bounds: dict[int, tuple[float, float] | None]) -> list[dict]:
    return [
        {
            "arm": arm,
            "task": "chat",
            "concurrency": c,
            "status": "ok" if b is not None else "invalid",
            "ci_lower": b[0] if b else None,
            "ci_upper": b[1] if b else None,
        }
        for c, b in bounds.items()
    ]


def test_a_gain_is_gone_only_where_the_upper_bound_is_below_one_and_only_there_gated():
    study = Study.model_validate(study_dict())
    sp = pd.DataFrame(
        # shown to 4; at 8 and 16 the interval holds 1.0: the data cannot tell, no gate
        rows(
            "vllm-eagle3",
            {1: (2.1, 2.6), 2: (1.8, 2.2), 4: (1.2, 1.6), 8: (0.97, 1.2), 16: (0.85, 1.05)},
        )
        # shown to 4, not shown at 8, gone at 16: drafting off above 8
        + rows(
            "vllm-ngram",
            {1: (2.1, 2.6), 2: (1.8, 2.2), 4: (1.2, 1.6), 8: (0.9, 1.1), 16: (0.7, 0.95)},
        )
        # shown to 8, gone at 16: the levels meet, nothing in between
        + rows(
            "sglang-dflash",
            {1: (2.5, 3.0), 2: (2.2, 2.6), 4: (1.9, 2.2), 8: (1.1, 1.3), 16: (0.8, 0.99)},
        )
    )
    got = {r["arm"]: r for r in speculation_pays(study, sp)}
    e = got["vllm-eagle3"]
    assert (e["pays_up_to"], e["status"], e["first_level_not_paying"], e["gate"]) == (
        4,
        "not_shown_gone",
        None,
        None,
    )
    assert e["label"] == (
        "pays up to 4 users (lower bound above 1.0); above it the interval"
        " includes 1.0 up to 16 users: the data could not show a gain, nor"
        " that it is gone (no gate)"
    )
    n = got["vllm-ngram"]
    assert (n["pays_up_to"], n["status"], n["first_level_not_paying"]) == (4, "stops", 16)
    assert n["label"] == (
        "pays up to 4 users (lower bound above 1.0); gone from 16 users"
        " (upper bound below 1.0); between, the data cannot tell"
    )
    assert n["gate"] == (
        'vLLM 0.32 --speculative-config: "num_speculative_tokens_per_batch_size":'
        " [[1, 8, 3], [9, <max_num_seqs>, 0]] (no drafts above 8 running"
        " requests; ignored with data parallelism)"
    )
    d = got["sglang-dflash"]
    assert (d["pays_up_to"], d["status"], d["first_level_not_paying"]) == (8, "stops", 16)
    assert (
        d["label"]
        == "pays up to 8 users (lower bound above 1.0); gone from 16 users (upper bound below 1.0)"
    )
    assert d["gate"].startswith(
        "SGLang 0.5.23: no batch-size switch-off for speculation; serve loads above 8 users"
    )


def test_a_drafter_that_never_showed_a_gain_is_gated_only_when_its_loss_is_shown():
    study = Study.model_validate(study_dict())
    unclear = speculation_pays(
        study, pd.DataFrame(rows("vllm-ngram", {c: (0.9, 1.1) for c in LEVELS}))
    )[0]
    assert (unclear["status"], unclear["pays_up_to"], unclear["gate"]) == (
        "not_shown_gone",
        None,
        None,
    )
    assert unclear["label"].startswith("no gain shown at the first level;")
    lost = speculation_pays(
        study, pd.DataFrame(rows("vllm-ngram", {c: (0.8, 0.95) for c in LEVELS}))
    )[0]
    assert (lost["status"], lost["first_level_not_paying"]) == ("never", 1)
    assert lost["label"] == "never pays: at 1 users the upper bound is already below 1.0"
    assert lost["gate"] == (
        "vLLM 0.32: speculation never paid here; serve this load without the drafter"
    )


def test_a_gain_left_at_the_top_is_a_bound_and_a_missing_cell_leaves_it_open():
    study = Study.model_validate(study_dict())
    top = speculation_pays(
        study, pd.DataFrame(rows("vllm-eagle3", {c: (1.5, 1.7) for c in LEVELS}))
    )
    assert (top[0]["status"], top[0]["pays_up_to"], top[0]["gate"]) == (
        "pays_at_every_level",
        16,
        None,
    )
    hole = speculation_pays(
        study,
        pd.DataFrame(
            rows(
                "vllm-eagle3",
                {1: (1.5, 1.7), 2: None, 4: (1.2, 1.4), 8: (0.8, 0.9), 16: (0.7, 0.8)},
            )
        ),
    )
    # A gone level behind a missing one is not read: the walk stops at the hole.
    assert (
        hole[0]["status"],
        hole[0]["pays_up_to"],
        hole[0]["first_level_not_paying"],
        hole[0]["gate"],
    ) == ("pays_then_unknown", 1, None, None)
