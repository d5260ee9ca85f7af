"""The task kinds: the one list the study schema, the loaders and the scorers use.

This module imports nothing from the harness, so ``harness.prereg.schema`` can
take its ``Literal`` from here without loading the data or scoring code.
A test (tests/workloads/test_steps.py) checks that the schema, the item
builders, the scorers and ``workloads/<kind>/task.yaml`` all agree with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypeVar, get_args

TaskKind = Literal["chat", "gsm8k", "humaneval", "mmlu", "speed_bench"]
TASK_KINDS: tuple[str, ...] = get_args(TaskKind)

# The kinds with a correctness scorer (their task.yaml declares `scorer.name` and
# its extraction steps); MT-Bench chat and SPEED-Bench are speed / output-identity tasks.
SCORED_KINDS: tuple[str, ...] = ("gsm8k", "humaneval", "mmlu")

# The kinds whose data is a hub dataset fetched into the hub cache (`specbench fetch`),
# never vendored (its license does not allow it) and never downloaded at run time.
CACHED_KINDS: tuple[str, ...] = ("speed_bench",)
# The kinds whose data is vendored under workloads/<kind>/ with LICENSE and PROVENANCE.
VENDORED_KINDS: tuple[str, ...] = tuple(k for k in TASK_KINDS if k not in CACHED_KINDS)

V = TypeVar("V")


def per_kind(table: Mapping[str, V], what: str) -> dict[str, V]:
    """`table` in TASK_KINDS order; raises if it misses a kind or names an unknown one."""
    missing = [k for k in TASK_KINDS if k not in table]
    extra = [k for k in table if k not in TASK_KINDS]
    if missing or extra:
        raise RuntimeError(
            f"{what}: missing kind(s) {missing}, unknown kind(s) {extra}; "
            f"the task kinds are {list(TASK_KINDS)} (harness/workloads/kinds.py)"
        )
    return {k: table[k] for k in TASK_KINDS}
