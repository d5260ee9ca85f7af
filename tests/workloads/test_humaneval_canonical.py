"""All 164 canonical HumanEval solutions pass; each with a `pass` body or a wrong return fails.

Everything goes through the real scorer (extraction, program assembly, sandbox).
"""

from __future__ import annotations

import pytest

from harness.workloads import load_items, score_items

# A wrong return: the canonical solution's result, perturbed by type.
PERTURBED = """
_specbench_original = {ep}


def _specbench_perturb(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        return v + 1
    if isinstance(v, str):
        return v + "x"
    if isinstance(v, list):
        return v + [None]
    if isinstance(v, tuple):
        return v + (None,)
    if v is None:
        return "wrong"
    return None


def {ep}(*args, **kwargs):
    return _specbench_perturb(_specbench_original(*args, **kwargs))
"""


@pytest.fixture(scope="module")
def items():
    return {it.id: it for it in load_items("humaneval")}


def _score(items, responses):
    scores = score_items("humaneval", items, responses, parallel=2)
    assert [s.id for s in scores] == list(responses)
    return scores


def test_every_canonical_solution_passes(items):
    # As a chat reply: the full function in a python block (run as is, no prompt).
    responses = {
        i: "Here is the function:\n```python\n"
        + it.reference["prompt"]
        + it.reference["canonical_solution"]
        + "```\nDone."
        for i, it in items.items()
    }
    scores = _score(items, responses)
    failed = [(s.id, s.detail) for s in scores if not s.correct]
    assert not failed
    assert len(scores) == 164
    assert all(s.detail.startswith("passed [sandbox: ") for s in scores)


def test_canonical_bodies_alone_pass_with_the_prompt_prepended(items):
    some = dict(list(items.items())[:20])
    scores = _score(some, {i: it.reference["canonical_solution"] for i, it in some.items()})
    assert all(s.correct for s in scores), [s.detail for s in scores if not s.correct]


def test_every_pass_body_fails(items):
    scores = _score(items, {i: "    pass\n" for i in items})
    passed = [s.id for s in scores if s.correct]
    assert not passed


def test_every_wrong_return_fails(items):
    responses = {
        i: "```python\n"
        + it.reference["prompt"]
        + it.reference["canonical_solution"]
        + PERTURBED.format(ep=it.reference["entry_point"])
        + "```"
        for i, it in items.items()
    }
    scores = _score(items, responses)
    passed = [s.id for s in scores if s.correct]
    assert not passed
