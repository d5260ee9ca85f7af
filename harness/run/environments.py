"""The run manifest's record of each engine environment: every package it holds.

For each interpreter a launched arm starts its engine from, the manifest's
`engine_environments[python]` holds the arms using it, the pin it was installed
from (engines.lock.toml) when it is a pinned venv, and its full package list. A
resume lists them again; an environment that changed since is recorded as a
deviation, with each package that moved.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from harness.engines import get_engine_kind
from harness.engines.install.packages import package_changes, package_list
from harness.engines.install.pins import pin_for_interpreter
from harness.prereg.schema import Study
from harness.run.store import RunStore
from harness.rundir.engines import EngineEnvironment
from harness.rundir.manifest import Deviation, Manifest


def engine_interpreters(study: Study) -> dict[str, list[str]]:
    """interpreter -> the launched arms that start their engine from it (study expanded)."""
    out: dict[str, list[str]] = {}
    for arm in study.arms:
        if arm.launch is None:
            continue
        kind = get_engine_kind(arm.engine)
        python = kind.interpreter(arm)
        if python is None and arm.launch.command:
            first = arm.launch.command[0]
            python = first if first.rsplit("/", 1)[-1].startswith("python") else None
        if python is not None:
            out.setdefault(python, []).append(arm.name)
    return out


def record_environments(store: RunStore, study: Study) -> list[str]:
    """List every engine environment into the manifest; returns the changes found
    against an earlier attempt's lists (also recorded as deviations)."""
    interpreters = engine_interpreters(study)
    with ThreadPoolExecutor(max_workers=4) as pool:
        lists = dict(zip(interpreters, pool.map(package_list, interpreters), strict=True))
    earlier = store.manifest().engine_environments
    recorded: dict[str, EngineEnvironment] = {}
    changes: list[str] = []
    for python, arms in interpreters.items():
        pinned = pin_for_interpreter(python)
        entry = EngineEnvironment(
            **lists[python],
            arms=arms,
            listed_wall=time.time(),
            pin=pinned.requirement if pinned else None,
        )
        before = earlier.get(python)
        if before and before.packages is not None and entry.packages is not None:
            moved = package_changes(before.packages, entry.packages)
            if moved:
                changes.append(f"engine environment {python} changed: " + "; ".join(moved))
        recorded[python] = entry

    def record(m: Manifest) -> None:
        m.engine_environments.update(recorded)
        m.deviations.extend(Deviation(when=time.time(), what=c) for c in changes)

    store.edit_manifest(record)
    return changes
