"""A drafter is a dependency of the checkpoint it was trained against.

A draft head trained against one target and served over another (the target replaced,
the head not retrained) drafts tokens the target rarely keeps. Where a drafter
checkpoint's config.json names the model it was trained against, `validate` compares
that name with the registered target (`model.id`), or with `drafter.trained_against`
when the registration names the base on purpose, and refuses a mismatch.

What the checkpoints carry: the speculators format (e.g. RedHatAI's EAGLE-3 heads) has
`speculators_config.verifier.name_or_path`, which vLLM 0.32 requires of it
(vllm/transformers_utils/configs/speculators/base.py:83); a PEFT-style config has
`base_model_name_or_path`. A config naming neither (EAGLE-3 heads in the original
EAGLE layout, DFlash's `dflash_config`, which lists target layers, not a model) is
not checked, and validate says so.

The checkpoint is read wherever it is on disk: a local folder given as the drafter's
model, or its snapshot in the hub cache after `specbench fetch`. Not on disk: not yet
checkable (fetch first), said once.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from harness.prereg.load import LoadedStudy
from harness.prereg.schema import Arm
from harness.weights.cache import find_checkpoint

BASE_FIELDS = (("speculators_config", "verifier", "name_or_path"), ("base_model_name_or_path",))


@dataclass(frozen=True)
class BaseCheck:
    arm: str
    config: Path | None  # the checkpoint's config.json, None when not on disk
    named: str | None  # the base it names, None when it names none
    field: str | None  # where in the config
    expected: str  # the registered target, or drafter.trained_against
    expected_from: str  # model.id | drafter.trained_against
    problem: str | None = None  # one line: file:line: field: what is wrong

    @property
    def ok(self) -> bool:
        return self.problem is None


def config_path(arm: Arm) -> Path | None:
    """The drafter checkpoint's config.json on this machine, None when it is not here."""
    drafter = arm.drafter
    model = drafter.model if drafter else None
    if drafter is None or not model or "${" in model:
        return None
    local = Path(os.path.expanduser(model))
    if local.is_dir():
        return local / "config.json" if (local / "config.json").is_file() else None
    if model.count("/") != 1:
        return None
    found = find_checkpoint(model, drafter.revision)
    if found.snapshot is None:
        return None
    config = found.snapshot / "config.json"
    return config if config.is_file() else None


def named_base(config: dict) -> tuple[str, str] | None:
    """The base model a checkpoint config names, and the field it is in."""
    for path in BASE_FIELDS:
        value: object = config
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value.strip():
            return value.strip(), ".".join(path)
    return None


def same_model(a: str, b: str) -> bool:
    """Hub ids compare whole (case-insensitive, as the hub does); a local folder by its
    last path component against the other's repository name."""
    a, b = a.rstrip("/"), b.rstrip("/")
    if a.lower() == b.lower():
        return True
    local = [x for x in (a, b) if x.startswith(("/", ".", "~")) or x.count("/") > 1]
    if local:
        return Path(a).name.lower() == Path(b).name.lower()
    return False


def check_drafter_bases(loaded: LoadedStudy) -> list[BaseCheck]:
    """One check per drafter arm with a checkpoint of its own."""
    study = loaded.study
    out = []
    for i, arm in enumerate(study.arms):
        if arm.drafter is None or not arm.drafter.model:
            continue
        d = arm.drafter
        expected, expected_from = (
            (d.trained_against, "drafter.trained_against")
            if d.trained_against
            else (study.model.id, "model.id")
        )
        path = config_path(arm)
        if path is None:
            out.append(BaseCheck(arm.name, None, None, None, expected, expected_from))
            continue
        where = loaded.where(("arms", i, "drafter", "model"))
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            out.append(
                BaseCheck(
                    arm.name,
                    path,
                    None,
                    None,
                    expected,
                    expected_from,
                    f"{where.file}:{where.line}: arms[{i}].drafter.model: {path}:"
                    f" not a readable JSON config ({err})",
                )
            )
            continue
        found = named_base(config) if isinstance(config, dict) else None
        if found is None:
            out.append(BaseCheck(arm.name, path, None, None, expected, expected_from))
            continue
        named, field = found
        problem = None
        if not same_model(named, expected):
            fix = (
                "register the base it was trained against as drafter.trained_against if"
                " that is intended"
                if expected_from == "model.id"
                else "drafter.trained_against names another base"
            )
            problem = (
                f"{where.file}:{where.line}: arms[{i}].drafter.model: arm {arm.name!r}:"
                f" its checkpoint was trained against {named!r} ({path.name} {field}),"
                f" but {expected_from} is {expected!r}: {fix}"
            )
        out.append(BaseCheck(arm.name, path, named, field, expected, expected_from, problem))
    return out


def base_line(check: BaseCheck) -> str:
    """One line for validate's output."""
    if check.config is None:
        return (
            f"  {check.arm}: drafter checkpoint not on disk here: its base is checked"
            " after `specbench fetch`"
        )
    if check.named is None:
        return f"  {check.arm}: {check.config} names no base model: not checked"
    verdict = "matches" if check.ok else "DIFFERS from"
    return (
        f"  {check.arm}: trained against {check.named!r} ({check.field}): {verdict}"
        f" {check.expected_from} {check.expected!r}"
    )
