"""Loading the tasks' items from the vendored data (or a hub dataset).

Vendored data lives in ``workloads/<kind>/`` beside its LICENSE and
PROVENANCE.json. ``PROVENANCE.json["vendored"]["files"]`` names every data
file with its sha256; each load hashes every one of them and refuses a file
whose digest differs (DataIntegrityError), before anything is parsed. Rows are
read with ``datasets.load_dataset("json", data_files=..., split="train")``, in
offline mode, with a cache directory keyed by the file's digest (so a changed
file can never be served from a stale cache).

SPEED-Bench is never vendored: its items are read from the hub cache
(harness.workloads.speed_bench), and its digests are those of the files read there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness import paths
from harness.errors import SpecbenchError
from harness.workloads.extract import gsm8k_gold
from harness.workloads.kinds import CACHED_KINDS, TASK_KINDS, per_kind
from harness.workloads.speed_bench import (
    REFERENCE_FIELDS,
    keep_categories,
    read_rows,
    speed_bench_digests,
    without_placeholders,
)
from harness.workloads.templates import TaskTemplate, load_task

# The registered MMLU draw (also in workloads/mmlu/PROVENANCE.json and
# workloads/mmlu/draw_sample.py; a test checks the three agree).
MMLU_DRAW_SEED = 20251130
MMLU_DRAW_N = 1000
_LETTERS = ("A", "B", "C", "D")


class DataIntegrityError(SpecbenchError):
    """A vendored data file is missing or differs from its recorded sha256."""


@dataclass(frozen=True)
class Item:
    id: str
    kind: str
    messages: list[dict]  # OpenAI chat messages
    reference: Any  # gold answer / test program pieces (a dict per kind)
    # The user's later turns of a multi-turn item (MT-Bench's second turn, SPEED-Bench's
    # multi-turn rows): sent as one session where the task registers `turns: all`.
    later_turns: tuple[str, ...] = ()


@runtime_checkable
class HubSourceLike(Protocol):
    """A study's optional hub dataset: `load_dataset(dataset, revision=..., split=...)`.

    An optional `config` (or `name`) attribute selects the dataset's
    configuration; without one, the task's hub_hint config is used when the
    dataset is the hinted one.
    """

    dataset: str
    revision: str
    split: str | None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def provenance(kind: str) -> dict:
    _check_kind(kind)
    path = paths.WORKLOADS_DIR / kind / "PROVENANCE.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise DataIntegrityError(f"{path}: missing (every vendored task carries one)") from err
    except json.JSONDecodeError as err:
        raise DataIntegrityError(f"{path}: not valid JSON: {err}") from err


def _check_kind(kind: str) -> None:
    if kind not in TASK_KINDS:
        raise ValueError(f"unknown task kind {kind!r}; known: {', '.join(TASK_KINDS)}")


def verify_files(kind: str) -> dict[str, str]:
    """sha256 of every vendored data file of `kind`, each checked against PROVENANCE.

    Returns {path relative to workloads/: sha256}. Raises DataIntegrityError,
    naming the file and both digests, on the first mismatch or missing file.
    """
    prov = provenance(kind)
    files = (prov.get("vendored") or {}).get("files")
    if not isinstance(files, dict) or not files:
        raise DataIntegrityError(
            f"workloads/{kind}/PROVENANCE.json: no 'vendored.files' digests to check against"
        )
    out: dict[str, str] = {}
    for name, meta in files.items():
        path = paths.WORKLOADS_DIR / kind / name
        rel = f"{kind}/{name}"
        if not path.is_file():
            raise DataIntegrityError(f"workloads/{rel}: missing vendored data file")
        want = str(meta.get("sha256", ""))
        got = sha256_file(path)
        if got != want:
            raise DataIntegrityError(
                f"workloads/{rel}: sha256 {got} does not match the recorded {want}",
                "refusing to load it: the study's items must be exactly the vendored ones "
                "(restore the file from git, or re-vendor it with new provenance)",
            )
        out[rel] = got
    return out


def data_digests(kind: str, source: HubSourceLike | None = None) -> dict[str, str]:
    """{path under workloads/: sha256} of every file the task uses.

    That is each vendored data file (verified against PROVENANCE.json) and the
    task's prompt template task.yaml (which decides the messages sent). A kind read
    from the hub cache (speed_bench) has its files there instead, named
    `dataset@revision/path` (`source` says which; absent from the cache: refused).
    """
    _check_kind(kind)
    if kind in CACHED_KINDS:
        digests = speed_bench_digests(source)
    else:
        digests = verify_files(kind)
    digests[f"{kind}/task.yaml"] = sha256_file(paths.WORKLOADS_DIR / kind / "task.yaml")
    return dict(sorted(digests.items()))


# --------------------------------------------------------------------------- datasets

_DATASETS_LOCK = threading.Lock()


@contextlib.contextmanager
def _quiet_datasets(offline: bool):
    """Import datasets; for local files force offline mode and hide progress bars."""
    import datasets
    from datasets import config as ds_config

    with _DATASETS_LOCK:
        saved = (ds_config.HF_HUB_OFFLINE, ds_config.HF_DATASETS_OFFLINE)
        bars = datasets.is_progress_bar_enabled()
        verbosity = datasets.logging.get_verbosity()
        try:
            if offline:
                ds_config.HF_HUB_OFFLINE = ds_config.HF_DATASETS_OFFLINE = True
            datasets.disable_progress_bars()
            datasets.logging.set_verbosity_error()
            yield datasets
        finally:
            ds_config.HF_HUB_OFFLINE, ds_config.HF_DATASETS_OFFLINE = saved
            if bars:
                datasets.enable_progress_bars()
            datasets.logging.set_verbosity(verbosity)


def _read_json_rows(path: Path, digest: str) -> list[dict]:
    cache = paths.CACHE_DIR / "datasets" / digest[:16]
    with _quiet_datasets(offline=True) as datasets:
        ds = datasets.load_dataset(
            "json", data_files=str(path), split="train", cache_dir=str(cache)
        )
        return ds.to_list()


def _read_hub_rows(kind: str, spec: TaskTemplate, source: HubSourceLike) -> list[dict]:
    hint = spec.hub_hint
    config = getattr(source, "config", None) or getattr(source, "name", None)
    if config is None and hint and hint.get("dataset") == source.dataset:
        config = hint.get("config")
    split = source.split or (hint or {}).get("split") or "test"
    args = [source.dataset] + ([config] if config else [])
    with _quiet_datasets(offline=False) as datasets:
        ds = datasets.load_dataset(
            *args,
            revision=source.revision,
            split=split,
            cache_dir=str(paths.CACHE_DIR / "datasets" / "hub"),
        )
        return ds.to_list()


# --------------------------------------------------------------------------- rows -> items


def _need(row: dict, key: str, where: str) -> Any:
    if key not in row or row[key] is None:
        raise DataIntegrityError(f"{where}: row lacks field {key!r}")
    return row[key]


def _items_gsm8k(spec: TaskTemplate, rows: list[dict], where: str) -> list[Item]:
    items = []
    for i, row in enumerate(rows):
        question = _need(row, "question", f"{where} line {i}")
        try:
            gold = gsm8k_gold(_need(row, "answer", f"{where} line {i}"))
        except ValueError as err:
            raise DataIntegrityError(f"{where} line {i}: {err}") from err
        items.append(
            Item(
                id=f"gsm8k:{i}",
                kind="gsm8k",
                messages=spec.render({"question": question}),
                reference={"answer": gold},
            )
        )
    return items


def _items_chat(spec: TaskTemplate, rows: list[dict], where: str) -> list[Item]:
    items = []
    for i, row in enumerate(rows):
        qid = row.get("question_id", row.get("prompt_id"))
        turns = row.get("turns", row.get("prompt"))
        if qid is None or not isinstance(turns, list) or not turns:
            raise DataIntegrityError(f"{where} row {i}: needs question_id and a list of turns")
        items.append(
            Item(
                id=f"chat:{qid}",
                kind="chat",
                messages=spec.render({"turn1": turns[0]}),
                reference={"question_id": qid, "category": row.get("category")},
                later_turns=tuple(str(t) for t in turns[1:]),
            )
        )
    return items


def _items_humaneval(spec: TaskTemplate, rows: list[dict], where: str) -> list[Item]:
    items = []
    for i, row in enumerate(rows):
        ref = {
            k: _need(row, k, f"{where} row {i}")
            for k in ("task_id", "prompt", "canonical_solution", "test", "entry_point")
        }
        items.append(
            Item(
                id=f"humaneval:{ref['task_id']}",
                kind="humaneval",
                messages=spec.render({"prompt": ref["prompt"]}),
                reference=ref,
            )
        )
    return items


def _mmlu_item(spec: TaskTemplate, row_id: str, subject: str, question, choices, answer) -> Item:
    if len(choices) != 4 or answer not in _LETTERS:
        raise DataIntegrityError(f"mmlu {row_id}: needs 4 choices and an answer letter A-D")
    fields = {"question": question, **dict(zip(_LETTERS, choices, strict=True))}
    return Item(
        id=f"mmlu:{row_id}",
        kind="mmlu",
        messages=spec.render(fields),
        reference={"answer": answer, "subject": subject},
    )


def _items_mmlu(spec: TaskTemplate, rows: list[dict], where: str) -> list[Item]:
    items = []
    for i, row in enumerate(rows):
        w = f"{where} line {i}"
        items.append(
            _mmlu_item(
                spec,
                _need(row, "id", w),
                _need(row, "subject", w),
                _need(row, "question", w),
                list(_need(row, "choices", w)),
                _need(row, "answer", w),
            )
        )
    return items


def mmlu_draw_key(row_id: str, seed: int = MMLU_DRAW_SEED) -> str:
    """The registered draw's sort key (see workloads/mmlu/draw_sample.py)."""
    return hashlib.sha256(f"{seed}:{row_id}".encode()).hexdigest()


def _items_mmlu_hub(spec: TaskTemplate, rows: list[dict], where: str) -> list[Item]:
    """Hub MMLU (cais/mmlu layout: question, subject, choices, answer index or letter).

    Row ids count rows per subject in the split's order; the registered draw
    (seed, n) is then applied, so a full test split yields the study's items.
    """
    per_subject: dict[str, int] = {}
    all_items = []
    for i, row in enumerate(rows):
        w = f"{where} row {i}"
        subject = _need(row, "subject", w)
        n = per_subject.get(subject, 0)
        per_subject[subject] = n + 1
        answer = _need(row, "answer", w)
        letter = _LETTERS[answer] if isinstance(answer, int) else str(answer)
        all_items.append(
            _mmlu_item(
                spec,
                f"{subject}/{n}",
                subject,
                _need(row, "question", w),
                list(_need(row, "choices", w)),
                letter,
            )
        )
    if len(all_items) < MMLU_DRAW_N:
        return sorted(all_items, key=_mmlu_order)
    keep = sorted(all_items, key=lambda it: mmlu_draw_key(it.id.split(":", 1)[1]))[:MMLU_DRAW_N]
    return sorted(keep, key=_mmlu_order)


def _items_speed_bench(spec: TaskTemplate, rows: list[dict], where: str) -> list[Item]:
    """SPEED-Bench rows (harness.workloads.speed_bench): the reference keeps the row's
    category, sub-category, difficulty, source, multiturn and how many turns it has."""
    items = []
    for i, row in enumerate(rows):
        qid, turns = row.get("question_id"), row.get("turns")
        if not qid or not isinstance(turns, list) or not turns:
            raise DataIntegrityError(f"{where} row {i}: needs question_id and a list of turns")
        if not isinstance(turns[0], str) or not turns[0].strip():
            # Never an empty prompt: a row whose text must first be rebuilt from its
            # source (src_id) is refused, not sent.
            raise DataIntegrityError(
                f"{where} row {i} (question_id {qid}): its first turn has no text"
            )
        reference = {k: row.get(k) for k in REFERENCE_FIELDS}
        reference["turns"] = len(turns)
        items.append(
            Item(
                id=f"speed_bench:{qid}",
                kind="speed_bench",
                messages=spec.render({"turn1": turns[0]}),
                reference=reference,
                # Sent as one session with `turns: all` (harness.measure.driver).
                later_turns=tuple(str(t) for t in turns[1:]),
            )
        )
    return items


def _mmlu_order(item: Item) -> tuple[str, int]:
    subject, row = item.id.split(":", 1)[1].rsplit("/", 1)
    return (subject, int(row))


_BUILDERS = per_kind(
    {
        "chat": _items_chat,
        "gsm8k": _items_gsm8k,
        "humaneval": _items_humaneval,
        "mmlu": _items_mmlu,
        "speed_bench": _items_speed_bench,
    },
    "harness/workloads/data.py item builders",
)


def subset_items(items: list[Item], n: int, seed: int = 0) -> list[Item]:
    """A seeded sample of n items in their original order.

    Items are ranked by sha256(f"{seed}:{id}") and the n lowest kept, so the
    sample depends only on the ids and the seed (not on library versions), and
    a smaller n with the same seed is a subset of a larger one.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"subset must be a positive integer, got {n!r}")
    if n >= len(items):
        return list(items)
    ranked = sorted(
        range(len(items)),
        key=lambda i: hashlib.sha256(f"{seed}:{items[i].id}".encode()).hexdigest(),
    )
    return [items[i] for i in sorted(ranked[:n])]


def load_items(
    kind: str,
    *,
    source: HubSourceLike | None = None,
    subset: int | None = None,
    subset_seed: int = 0,
) -> list[Item]:
    """The task's items: vendored data by default (every file's sha256 checked first).

    `source` names a hub dataset and revision instead (network needed); the
    same id scheme and prompt template apply. `subset` keeps a seeded sample of
    that many items (see subset_items) for small demos.
    """
    _check_kind(kind)
    spec = load_task(kind)
    if kind in CACHED_KINDS:
        # From the hub cache only, offline (`specbench fetch` put it there).
        where = (
            f"{source.dataset}@{source.revision} {getattr(source, 'config', None)}"
            if source
            else kind
        )
        try:
            rows = keep_categories(read_rows(source), getattr(source, "categories", None), where)
            rows = without_placeholders(rows, getattr(source, "placeholders", None), where)
        except ValueError as err:
            raise DataIntegrityError(str(err)) from None
        items = _BUILDERS[kind](spec, rows, where)
    elif source is not None:
        for attr in ("dataset", "revision"):
            if not isinstance(getattr(source, attr, None), str) or not getattr(source, attr):
                raise ValueError(f"hub source needs a non-empty {attr!r}")
        rows = _read_hub_rows(kind, spec, source)
        where = f"{source.dataset}@{source.revision}"
        builder = _items_mmlu_hub if kind == "mmlu" else _BUILDERS[kind]
        items = builder(spec, rows, where)
    else:
        digests = verify_files(kind)
        prov_files = provenance(kind)["vendored"]["files"]
        items = []
        for name in spec.files:
            rel = f"{kind}/{name}"
            if rel not in digests:
                raise DataIntegrityError(
                    f"workloads/{kind}/task.yaml names data file {name!r}, "
                    "which PROVENANCE.json does not record"
                )
            rows = _read_json_rows(paths.WORKLOADS_DIR / rel, digests[rel])
            want = prov_files[name].get("items")
            if isinstance(want, int) and len(rows) != want:
                raise DataIntegrityError(f"workloads/{rel}: {len(rows)} rows, expected {want}")
            items.extend(_BUILDERS[kind](spec, rows, f"workloads/{rel}"))
    seen: set[str] = set()
    for it in items:
        if it.id in seen:
            raise DataIntegrityError(f"{kind}: duplicate item id {it.id}")
        seen.add(it.id)
    if subset is not None:
        items = subset_items(items, subset, subset_seed)
    return items
