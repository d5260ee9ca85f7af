"""`specbench fetch FILE`: download the target and every draft checkpoint at their
registered revisions before the clock starts, hash their weights, and for a branch
print the commit sha to register; and each task's hub dataset that is read from the
hub cache (SPEED-Bench), at its registered commit, with the sha256 of the files the
task reads (the seal's)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.prereg import load_study_file
from harness.prereg.pins import hub_checkpoints
from harness.weights.cache import hub_cache_dir
from harness.weights.datasets import DatasetNotFetched, fetch_dataset, file_digests, task_dataset
from harness.weights.hashes import weight_hashes
from harness.weights.hub import NotFetched, fetch, offline, pinned_text, size_text
from harness.workloads.speed_bench import counts_text, task_placeholders


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fetch",
        help="download the study's model and draft checkpoints (and SPEED-Bench tasks'"
        " datasets) at their revisions into the hub cache, and hash them",
    )
    p.add_argument("file", help="the study's prereg YAML")
    p.set_defaults(func=run)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def run(args: argparse.Namespace) -> int:
    loaded = load_study_file(args.file)
    console = Console(highlight=False, soft_wrap=True)
    cache = hub_cache_dir()
    checkpoints = hub_checkpoints(loaded.study, loaded)
    mode = "offline (HF_HUB_OFFLINE): the cache only" if offline() else "online"
    console.print(f"hub cache {cache} ({mode}); {len(checkpoints)} hub checkpoint(s)")
    failed: list[str] = []
    to_register: list[str] = []
    for ckpt in checkpoints:
        console.print(f"[bold]{', '.join(ckpt.roles)}[/bold] {ckpt.label}  ({ckpt.where})")
        try:
            snap = fetch(ckpt, console, cache)
            files, hashed = weight_hashes(snap.path)
        except NotFetched as err:
            console.print(f"  [red]missing[/red]: {err.lines[0]}")
            failed.append(f"{', '.join(ckpt.roles)} {err.lines[0]}")
            continue
        weights = sum(f.size for f in files)
        console.print(
            f"  ok: commit {snap.commit}, {size_text(_size(snap.path))}"
            f" ({len(files)} weight files, {size_text(weights)}) in {snap.path}"
        )
        for f in files:
            console.print(f"  sha256 {f.sha256}  {f.file}  {size_text(f.size)}")
        console.print(f"  weights hashed now: {hashed}, from the cache: {len(files) - hashed}")
        pin = pinned_text(ckpt, snap)
        if pin is not None:
            console.print(
                f"  [yellow]not pinned[/yellow]: {ckpt.why_unpinned()};"
                f" register `{pin}` at {ckpt.where}"
            )
            to_register.append(f"register: {ckpt.repo} {pin} at {ckpt.where}")
    datasets = fetch_datasets(loaded.study, console, cache, failed)
    for line in to_register:
        print(line)
    if failed:
        raise NotFetched(*failed)
    if checkpoints:
        print(
            f"fetched: {len(checkpoints)} checkpoint(s) in {cache}; engines start from them"
            " offline (HF_HUB_OFFLINE=1)"
        )
    else:
        print("nothing to fetch: the study loads no hub checkpoint (local paths only)")
    if datasets:
        print(f"fetched: {datasets} task dataset(s) in {cache}; tasks read them offline")
    return 0


def fetch_datasets(study, console: Console, cache: Path, failed: list[str]) -> int:
    """Each hub-cache task dataset at its revision, its files' sha256 printed; a failure
    is appended to `failed`. Returns how many were fetched."""
    done = 0
    for task in study.tasks:
        source = task_dataset(task)
        if source is None:
            continue
        console.print(f"[bold]task {task.name}[/bold] {source.label}")
        try:
            fetch_dataset(source, console, cache, offline=offline())
            digests = file_digests(source, cache)
        except DatasetNotFetched as err:
            console.print(f"  [red]missing[/red]: {err.lines[0]}")
            failed.append(f"task {task.name} {err.lines[0]}")
            continue
        for name, digest in digests.items():
            console.print(f"  sha256 {digest}  {name}")
        counts = task_placeholders(task.source)
        console.print(
            f"  placeholder rows (never sent), by category: {counts_text(counts)}", markup=False
        )
        done += 1
    return done
