"""Each measured speedup held against the planning formula (Leviathan et al.; Chen et al.):

    speedup = E[tokens] x t_target(B, 1) / (s x t_draft(B) + t_target(B, k + 1))

with E[tokens] = 1 + p_1 + ... + p_k from the engine's per-position counters of the
drafter cell (vLLM's `num_accepted_tokens_per_pos` over its drafts: draft positions
only), s the drafter's forward passes per round (`drafter.draft_steps`, default k),
and the step times from the plan's roofline (plan.roofline_step_s: `hardware`,
`model`, `drafter.params_billion`), at the bandwidth and FLOP rate measured at the run's
start where it has them (the manifest's `calibration`, harness/calibration.py), else the
registered ones. B is the registered concurrency. The predicted round
cost is the denominator over t_target(B, 1).

The roofline flatters speculation (launches, sampling, ragged accepts are not in it):
`prediction_gap` = measured / predicted - 1 shows by how much. Where the engine has no
per-position counters (SGLang), E[tokens] falls back to its tokens per round,
and the source column says so.

The client's tokens per round are per decode step; the engine's 1 + sum(p_i) per the
round its engine counts (the cell table's `engine_round`): per drafting round where vLLM
counts a draft only on steps with draft tokens (n-gram without async scheduling: no
match, no draft), so `tokens_per_round` may sit below `engine_tokens_per_round`; per
scheduled decode step under vLLM's async scheduling, which counts a draft on every
decode step (ngram_gpu and EAGLE-3 on a GPU), and per decode step for a drafter that
always drafts: then a round is the step the prediction costs. `tokens_per_round_note`
says why when they part by more than 5 %.
"""

from __future__ import annotations

import math

import pandas as pd

from harness.analysis.acceptance_requests import AGREE_WITHIN
from harness.analysis.frame import columns
from harness.analysis.rows import Prediction
from harness.calibration import RooflineFigures
from harness.plan import roofline_step_s
from harness.prereg.schema import Study

# Methods whose drafts cost no forward pass of a model of their own.
MODEL_FREE = ("ngram", "ngram_gpu", "suffix")


def predicted(
    study: Study,
    arm_name: str,
    concurrency: int,
    e_tokens: float,
    figures: RooflineFigures | None = None,
) -> tuple[float, float]:
    """(predicted speedup, predicted round cost ratio) at concurrency B; `figures`: the
    roofline's inputs (the registered hardware by default)."""
    d = study.arm(arm_name).drafter
    assert d is not None
    k = d.num_draft_tokens
    steps = d.draft_steps or k
    plain = roofline_step_s(study, concurrency, figures=figures)
    draft = (
        steps * roofline_step_s(study, concurrency, d.params_billion, figures)
        if d.params_billion
        else 0.0
    )
    cost = (draft + roofline_step_s(study, concurrency * (k + 1), figures=figures)) / plain
    return e_tokens / cost, cost


def engine_tokens(cell: pd.Series) -> tuple[float | None, str | None]:
    """E[tokens] of a drafter cell from the engine: 1 + sum of per-position rates, else
    its tokens per round; each per the round its engine counts (cells.engine_rounds)."""
    per = f"per {cell.get('engine_round') or 'drafting round'}"
    s = cell.get("accept_rate_sum")
    if s is not None and not _nan(s):
        return 1.0 + float(s), f"1 + sum(p_i), per-position counters, {per}"
    per_round = cell.get("accept_length_per_round_engine")
    if per_round is not None and not _nan(per_round):
        return float(per_round), f"engine tokens {per} (no per-position counters)"
    return None, None


def add_predictions(
    study: Study,
    speedups: pd.DataFrame,
    cells: pd.DataFrame,
    figures: RooflineFigures | None = None,
) -> pd.DataFrame:
    """speedups with the prediction columns, from the cell table's engine figures, on the
    roofline `figures` (the registered hardware by default)."""
    by_id = cells.set_index("cell_id") if len(cells) else cells
    rows = []
    for r in speedups.to_dict("records"):
        out = dict.fromkeys(columns(Prediction))
        cell = by_id.loc[r["drafter_cell"]] if r["drafter_cell"] in by_id.index else None
        e, source = engine_tokens(cell) if cell is not None else (None, None)
        if cell is not None and e is not None and r.get("status") == "ok":
            speed, cost = predicted(study, r["arm"], int(r["concurrency"]), e, figures)
            out.update(
                engine_tokens_per_round=e,
                engine_tokens_source=source,
                predicted_speedup=speed,
                predicted_round_cost_ratio=cost,
            )
            drafter = study.arm(r["arm"]).drafter
            assert drafter is not None  # a speedup row is a drafter arm's
            if drafter.params_billion is None and drafter.method not in MODEL_FREE:
                out["prediction_note"] = (
                    "draft cost counted as 0: register the draft model's"
                    " size as drafter.params_billion"
                )
            if not _nan(r.get("speedup")):
                out["prediction_gap"] = float(r["speedup"]) / speed - 1.0
            if not _nan(r.get("round_cost_ratio")):
                out["round_cost_gap"] = float(r["round_cost_ratio"]) / cost - 1.0
            out["tokens_per_round_note"] = _tokens_note(
                r.get("tokens_per_round"), e, cell.get("engine_round")
            )
        rows.append(out)
    extra = pd.DataFrame(rows, columns=columns(Prediction), index=speedups.index)
    return pd.concat([speedups, extra], axis=1)


def _tokens_note(client: float | None, engine: float, round_: str | None) -> str | None:
    if client is None or _nan(client):
        return None
    gap = client / engine - 1.0
    if abs(gap) <= AGREE_WITHIN:
        return None
    if gap < 0:
        why = (
            "steps without a draft (no n-gram match) count in the client's per-step figure,"
            " not the engine's per-drafting-round one"
            if round_ == "drafting round"
            else f"both count per {round_ or 'step'} (every step a round, drafted or not), so"
            " steps without drafts do not explain it: look at the engine's counters"
        )
    else:
        why = (
            "chunks carrying several steps (stream_interval > 1, or a late flush) raise"
            " the client's figure"
        )
    return f"client {client:.2f} vs engine {engine:.2f} ({gap:+.0%}): {why}"


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))
