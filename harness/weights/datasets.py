"""Hub datasets in the hub cache, beside the checkpoints: finding one offline, downloading
one at its registered revision, and the sha256 of the files a task reads from it.

A task whose data is a hub dataset that may not be vendored (SPEED-Bench: its license,
workloads/README.md) is read from the one hub cache (harness.weights.cache) and nowhere
else: `specbench fetch` downloads it there (huggingface_hub's snapshot_download with
repo_type="dataset"); the seal covers the sha256 of each file the task reads; `validate`
and pre-flight refuse a study whose dataset is not there; the loader reads it offline.

The layout is huggingface_hub's: datasets--ORG--NAME/refs/<branch> (the commit sha) and
snapshots/<sha>/<files>, each file a link to blobs/<digest>. A configuration's files are
the ones its dataset card's `configs:` names (README.md front matter), else the parquet
files under a folder named after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from harness.errors import InputError
from harness.weights.cache import hub_cache_dir, is_commit
from harness.weights.hashes import sha256_of

if TYPE_CHECKING:  # the registration is read above this package
    from harness.prereg.load import LoadedStudy


class DatasetNotFetched(InputError):
    """A task's hub dataset that is not in the hub cache, or cannot be downloaded."""


@dataclass(frozen=True)
class DatasetSource:
    """What a task reads: a dataset's configuration at a commit (schema.HubSource)."""

    dataset: str
    revision: str
    config: str

    @property
    def label(self) -> str:
        return f"{self.dataset}@{self.revision} (config {self.config})"


def dataset_folder(cache: Path, repo: str) -> Path:
    """datasets--org--name, as huggingface_hub lays a dataset repository out in its cache."""
    return cache / "--".join(["datasets", *repo.split("/")])


def _card_patterns(snapshot: Path, config: str, split: str) -> list[str] | None:
    """The `configs:` data_files patterns the dataset card (README.md front matter) gives
    for the configuration's split (None: the card gives none)."""
    import yaml

    try:
        text = (snapshot / "README.md").read_text(encoding="utf-8")
        front = yaml.safe_load(text.split("---", 2)[1]) if text.startswith("---") else None
    except (OSError, IndexError, yaml.YAMLError):
        return None
    for entry in (front or {}).get("configs") or []:
        if not isinstance(entry, dict) or entry.get("config_name") != config:
            continue
        files = entry.get("data_files")
        if isinstance(files, str):
            return [files]
        if isinstance(files, list):
            return [
                str(f["path"])
                for f in files
                if isinstance(f, dict) and f.get("split") == split and "path" in f
            ]
    return None


def config_patterns(snapshot: Path, config: str, split: str = "test") -> list[str]:
    """What a download of the configuration alone asks the hub for (snapshot_download's
    allow_patterns, fnmatch on the path): the card's `configs:` patterns, else the parquet
    files under a folder named after the configuration or named `<config>-*.parquet`, as
    config_files reads them."""
    return _card_patterns(snapshot, config, split) or [
        f"{config}/*.parquet",
        f"*/{config}/*.parquet",
        f"{config}-*.parquet",
        f"*/{config}-*.parquet",
    ]


def config_files(snapshot: Path, config: str, split: str = "test") -> list[Path]:
    """The configuration's parquet files in a snapshot, in a stable order: as the dataset
    card's `configs:` names them, else those under a folder named after the configuration
    (or named `<config>-*.parquet`)."""
    patterns = _card_patterns(snapshot, config, split)
    if patterns:
        return sorted({p for pattern in patterns for p in snapshot.glob(pattern) if p.is_file()})
    return sorted(
        p
        for p in snapshot.rglob("*.parquet")
        if config in p.relative_to(snapshot).parts[:-1] or p.name.startswith(f"{config}-")
    )


def snapshot_of(source: DatasetSource, cache: Path | None = None) -> Path | None:
    """The cached snapshot of the dataset at its revision (None: not in the cache)."""
    root = dataset_folder(cache or hub_cache_dir(), source.dataset)
    commit = source.revision
    if not is_commit(commit):
        ref = root / "refs" / commit
        commit = ref.read_text().strip() if ref.is_file() else ""
    snapshot = root / "snapshots" / commit
    return snapshot if commit and snapshot.is_dir() else None


def absent_line(source: DatasetSource, cache: Path | None = None) -> str | None:
    """Why the configuration's files are not in the cache, in one line (None: they are)."""
    cache = cache or hub_cache_dir()
    snapshot = snapshot_of(source, cache)
    if snapshot is None:
        return (
            f"{source.label} is not in the hub cache {cache}: expected"
            f" {dataset_folder(cache, source.dataset).name}/snapshots/{source.revision};"
            " run `specbench fetch` on the study"
        )
    if not config_files(snapshot, source.config):
        return (
            f"{source.label}: its snapshot in {cache} has no parquet file of the"
            f" configuration {source.config!r}; run `specbench fetch` on the study"
        )
    return None


def dataset_files(source: DatasetSource, cache: Path | None = None) -> list[Path]:
    """The configuration's parquet files in the cache, offline. Raises DatasetNotFetched."""
    problem = absent_line(source, cache)
    if problem is not None:
        raise DatasetNotFetched(problem)
    snapshot = snapshot_of(source, cache)
    assert snapshot is not None
    return config_files(snapshot, source.config)


def file_digests(source: DatasetSource, cache: Path | None = None) -> dict[str, str]:
    """{dataset@revision/path in the snapshot: sha256} of the files the task reads."""
    files = dataset_files(source, cache)
    snapshot = snapshot_of(source, cache)
    assert snapshot is not None
    return {
        f"{source.dataset}@{source.revision}/{p.relative_to(snapshot).as_posix()}": sha256_of(p)
        for p in files
    }


def fetch_dataset(
    source: DatasetSource, console: Console, cache: Path | None = None, offline: bool = False
) -> list[Path]:
    """Download the registered configuration of the dataset at its revision into the hub
    cache (offline: find it there): first the dataset card, then the files the card names
    for the configuration, not the whole repository (SPEED-Bench holds every config,
    ~100 MB). huggingface_hub skips what the cache already holds."""
    cache = cache or hub_cache_dir()
    if offline:
        return dataset_files(source, cache)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    from harness.weights.hub import download_problem

    try:
        card = snapshot_download(
            source.dataset,
            repo_type="dataset",
            revision=source.revision,
            cache_dir=cache,
            allow_patterns=["README.md"],
        )
        snapshot_download(
            source.dataset,
            repo_type="dataset",
            revision=source.revision,
            cache_dir=cache,
            allow_patterns=config_patterns(Path(card), source.config),
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as err:
        raise DatasetNotFetched(
            download_problem(err, source.label, source.revision, "dataset")
        ) from None
    return dataset_files(source, cache)


def task_dataset(task: object) -> DatasetSource | None:
    """The hub-cache dataset a registered task reads (None: vendored data, or a hub
    source the datasets library downloads itself)."""
    from harness.workloads.kinds import CACHED_KINDS

    source = getattr(task, "source", None)
    if getattr(task, "kind", None) not in CACHED_KINDS or source is None:
        return None
    return DatasetSource(source.dataset, source.revision, source.config)


def dataset_problems(study: object, loaded: LoadedStudy | None = None) -> list[str]:
    """One line per task whose dataset is not in the hub cache: with `loaded` (a
    prereg.LoadedStudy), `file:line: tasks[i].revision: ...`, as validate prints it."""
    out = []
    for i, task in enumerate(getattr(study, "tasks", [])):
        source = task_dataset(task)
        problem = absent_line(source) if source is not None else None
        if problem is None:
            continue
        field = f"tasks[{i}].revision"
        if loaded is not None:
            where = loaded.where(("tasks", i, "revision"))
            out.append(f"{where.file}:{where.line}: {field}: task {task.name!r}: {problem}")
        else:
            out.append(f"{field}: task {task.name!r}: {problem}")
    return out
