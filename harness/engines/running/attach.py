"""An attach arm's endpoint, checked: it answers /v1/models, lists the arm's served
model, and that model is the study's. Asked by pre-flight, `specbench doctor` and the
attach itself (harness.engines.running.lifecycle)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study


def _same_model(names: set[str], registered: set[str]) -> bool:
    if names & registered:
        return True
    base = {n.rstrip("/").rsplit("/", 1)[-1].lower() for n in names}
    return bool(base & {r.rstrip("/").rsplit("/", 1)[-1].lower() for r in registered})


def attach_problem(arm: Arm, study: Study, timeout_s: float = 10.0) -> str | None:
    """Why an attach arm's endpoint is unusable, or None: it must answer
    /v1/models, list the arm's served model, and that model must be the study's
    (by name, or by the path or id it was loaded from)."""
    attach = arm.attach
    if attach is None:
        return f"arm {arm.name!r} attaches to no endpoint (it has launch)"
    url = attach.base_url + "/v1/models"
    try:
        response = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as err:
        return f"attached endpoint {attach.base_url} does not answer: {type(err).__name__}: {err}"
    if response.status_code != 200:
        return f"attached endpoint {url} answered HTTP {response.status_code}"
    try:
        models = [m for m in response.json().get("data", []) if isinstance(m, dict)]
    except (ValueError, AttributeError):
        return f"attached endpoint {url} did not answer with an OpenAI model list"
    entry = next((m for m in models if m.get("id") == attach.served_model), None)
    if entry is None:
        ids = [m.get("id") for m in models]
        return f"attached endpoint {attach.base_url} serves {ids}, not {attach.served_model!r}"
    # What it was loaded from (vLLM and SGLang report it as `root`) must be the study's
    # model, by id or path or at least by its last path part; without a root, the name.
    root = entry.get("root")
    names = {str(root)} if root else {attach.served_model}
    registered = (
        {study.model.id} if root else {v for v in (study.model.id, study.model.served_name) if v}
    )
    if not _same_model(names, registered):
        return (
            f"attached endpoint {attach.base_url} serves {attach.served_model!r} loaded from"
            f" {root or attach.served_model!r}, but the study registers model {study.model.id!r}"
        )
    return None


__all__ = ["attach_problem"]
