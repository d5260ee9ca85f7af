"""A failed hub download, for checkpoints and datasets alike, is one line saying which
of the hub's failures it was (harness.weights.hub.download_problem)."""

from __future__ import annotations

import httpx2  # what huggingface_hub raises its errors with
import pytest
from huggingface_hub.errors import (
    GatedRepoError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from harness.weights.hub import download_problem

RESPONSE = httpx2.Response(404, request=httpx2.Request("GET", "https://huggingface.co/x"))


@pytest.mark.parametrize(
    "err, said",
    [
        (
            GatedRepoError("x", response=RESPONSE),
            "org/data@abc: the dataset is gated: accept its terms on the hub and log in",
        ),
        (
            RepositoryNotFoundError("x", response=RESPONSE),
            "org/data@abc: no such dataset on the hub",
        ),
        (
            RevisionNotFoundError("x", response=RESPONSE),
            "org/data@abc: the dataset has no revision 'abc'",
        ),
        (
            LocalEntryNotFoundError("no network\nmore"),
            "org/data@abc: cannot reach the hub and it is not cached (no network)",
        ),
        (OSError("disk full"), "org/data@abc: download failed: OSError: disk full"),
    ],
)
def test_each_hub_failure_is_named_in_one_line(err, said):
    line = download_problem(err, "org/data@abc", "abc", "dataset")
    assert line.startswith(said) and "\n" not in line, line
    assert download_problem(err, "org/m@abc", "abc").startswith(
        said.replace("org/data", "org/m").replace("dataset", "repository")
    )
