"""Pins that hold: the checkpoints a study loads, which of them are not pinned to a
commit, and the `TO FIX BEFORE THE RUN` markers still open in its files.

A revision is pinned only when it is a full 40-hex commit sha: a branch (`main`) or a
tag can move on the hub between registration and run, and no revision means the
hub's default branch. Local paths (and `${VAR}`, which names a path on this machine)
are not hub checkpoints and need no pin.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.engines import ENGINE_KINDS
from harness.engines.launch.base import looks_like_local_path
from harness.errors import InputError
from harness.prereg.load import LoadedStudy
from harness.prereg.schema import Study

TO_FIX_MARKER = "TO FIX BEFORE THE RUN"
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")


def is_commit_sha(revision: str | None) -> bool:
    return revision is not None and COMMIT_SHA.match(revision) is not None


def is_hub_id(model: str) -> bool:
    """A hub repository id, not a path on this machine."""
    if "${" in model or looks_like_local_path(model):
        return False
    return not Path(os.path.expanduser(model)).exists()


def shown_path(path: Path) -> str:
    """A path as the user can type it: relative to the working folder when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class Checkpoint:
    """One hub checkpoint at one registered revision, and every role it plays."""

    repo: str
    revision: str | None
    roles: tuple[str, ...]  # "model", "drafter of arm sglang-dflash", ...
    where: str  # file:line of its revision (or of the model/drafter when none is given)

    @property
    def pinned(self) -> bool:
        return is_commit_sha(self.revision)

    @property
    def label(self) -> str:
        return f"{self.repo}@{self.revision or '(none)'}"

    def why_unpinned(self) -> str:
        if self.revision is None:
            return "no revision (the hub's default branch, which moves)"
        return f"revision {self.revision!r} is not a commit sha (a branch or tag moves)"


@dataclass(frozen=True)
class OpenMarker:
    file: str
    line: int
    text: str  # the line from the marker on


@dataclass
class PinReport:
    """What `validate` lists and `run` gates on."""

    gpu: bool  # some arm runs on a GPU engine kind
    gpu_engines: list[str]
    checkpoints: list[Checkpoint]
    markers: list[OpenMarker] = field(default_factory=list)

    @property
    def unpinned(self) -> list[Checkpoint]:
        return [c for c in self.checkpoints if not c.pinned]

    @property
    def open(self) -> bool:
        return bool(self.unpinned or self.markers)

    def refusal(self, study_file: str) -> str:
        """The one line `run` refuses a GPU study with."""
        parts = [f"{', '.join(c.roles)} {c.label} ({c.where})" for c in self.unpinned]
        text = f"{study_file}: not pinned for a GPU run ({', '.join(self.gpu_engines)} arms):"
        if parts:
            text += f" unpinned revisions: {'; '.join(parts)};"
        if self.markers:
            where = ", ".join(f"{m.file}:{m.line}" for m in self.markers)
            text += f" {len(self.markers)} open {TO_FIX_MARKER!r} markers: {where};"
        return (
            text + " pin each revision to a 40-hex commit sha (`specbench fetch` prints it),"
            " resolve the markers, or pass --allow-unpinned to run anyway and record the"
            " deviation"
        )

    def deviation(self) -> dict[str, Any]:
        """The manifest's record of a run let through by --allow-unpinned."""
        return {
            "what": "ran with unpinned revisions or open markers (--allow-unpinned)",
            "unpinned": [
                {
                    "checkpoint": c.repo,
                    "revision": c.revision,
                    "roles": list(c.roles),
                    "where": c.where,
                }
                for c in self.unpinned
            ],
            "open_markers": [f"{m.file}:{m.line}: {m.text}" for m in self.markers],
        }


def _where(loaded: LoadedStudy | None, loc: tuple) -> str:
    if loaded is None:
        return "-"
    at = loaded.where(loc)
    return f"{shown_path(at.file)}:{at.line}"


def hub_checkpoints(study: Study, loaded: LoadedStudy | None = None) -> list[Checkpoint]:
    """The hub checkpoints the study's engines load: the target, for any arm on a real
    engine, and each such arm's draft model; one entry per repo and revision."""
    found: dict[tuple[str, str | None], Checkpoint] = {}

    def add(repo: str, revision: str | None, role: str, loc: tuple) -> None:
        key = (repo, revision)
        if key in found:
            old = found[key]
            if role not in old.roles:
                found[key] = Checkpoint(repo, revision, (*old.roles, role), old.where)
            return
        found[key] = Checkpoint(repo, revision, (role,), _where(loaded, loc))

    real = [(i, a) for i, a in enumerate(study.arms) if a.scripted is None]
    model = study.model
    if real and is_hub_id(model.id):
        add(
            model.id,
            model.revision,
            "model",
            ("model", "revision") if model.revision is not None else ("model", "id"),
        )
    for i, arm in real:
        d = arm.drafter
        if d is None or d.model is None or not is_hub_id(d.model):
            continue
        loc = ("arms", i, "drafter", "revision" if d.revision is not None else "model")
        add(d.model, d.revision, f"drafter of arm {arm.name}", loc)
    return list(found.values())


def open_markers(loaded: LoadedStudy) -> list[OpenMarker]:
    """Every line of the registration and its arm files that carries the marker."""
    files = [loaded.path, *dict.fromkeys(loaded.arm_files.values())]
    out: list[OpenMarker] = []
    for path in files:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise InputError(f"{path}: cannot read: {err}") from None
        for n, line in enumerate(text.splitlines(), start=1):
            at = line.find(TO_FIX_MARKER)
            if at >= 0:
                out.append(OpenMarker(shown_path(path), n, line[at:].strip()))
    return out


def gpu_engines(study: Study) -> list[str]:
    """The GPU engine kinds among the study's arms (vllm, sglang; not vllm-cpu or scripted)."""
    kinds = {a.engine for a in study.arms if (k := ENGINE_KINDS.get(a.engine)) and k.gpu}
    return sorted(kinds)


def pin_report(loaded: LoadedStudy) -> PinReport:
    engines = gpu_engines(loaded.study)
    return PinReport(
        gpu=bool(engines),
        gpu_engines=engines,
        checkpoints=hub_checkpoints(loaded.study, loaded),
        markers=open_markers(loaded),
    )


def gate(loaded: LoadedStudy, allow_unpinned: bool) -> dict[str, Any] | None:
    """Refuse a GPU study that is not pinned (InputError, one line), unless allowed:
    then the deviation to record. None when there is nothing to record."""
    report = pin_report(loaded)
    if not (report.gpu and report.open):
        return None
    if not allow_unpinned:
        raise InputError(report.refusal(shown_path(loaded.path)))
    return report.deviation()
