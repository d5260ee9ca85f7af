#!/usr/bin/env python3
"""Reproduce the study's MMLU sample from the MMLU zip (standard library only).

The rule, registered with the seed in PROVENANCE.json ("draw"):

1. Read every ``data/test/<subject>_test.csv`` in the zip (headerless CSV:
   question, A, B, C, D, answer letter), subjects in sorted file-name order and
   rows in file order. Row ``i`` (0-based) of subject ``s`` has id ``s/i``;
   there are 14,042 rows in 57 subjects.
2. Give each row the key ``sha256(f"{SEED}:{id}")`` (hex digest of the UTF-8
   text) and keep the ``N`` rows with the smallest keys.
3. Write the kept rows in their original (subject, row) order, one JSON object
   per line: ``{"id", "subject", "question", "choices", "answer"}``, serialised
   with ``json.dumps(row, ensure_ascii=False) + "\\n"``.

A hash ranking rather than a pseudo-random generator keeps the draw identical
on any Python or NumPy version. Serialising all 14,042 rows the same way gives
the upstream provenance's ``mmlu_test_all.jsonl`` byte for byte, which checks
the CSV parsing (``--check`` verifies that too).

Usage:
    python draw_sample.py                 # writes mmlu_test_sample.jsonl beside this file
    python draw_sample.py --check         # compares with the vendored sample and PROVENANCE
    python draw_sample.py --zip PATH --out PATH --seed N --n N
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20251130
N = 1000
DEFAULT_ZIP = HERE / "source" / "mmlu.zip"
DEFAULT_OUT = HERE / "mmlu_test_sample.jsonl"
TEST_PREFIX = "data/test/"
TEST_SUFFIX = "_test.csv"


def read_test_rows(zip_path: Path) -> list[dict]:
    """All test rows of the zip, subjects sorted by file name, rows in file order."""
    rows: list[dict] = []
    with zipfile.ZipFile(zip_path) as zf:
        names = sorted(
            n for n in zf.namelist() if n.startswith(TEST_PREFIX) and n.endswith(TEST_SUFFIX)
        )
        for name in names:
            subject = name[len(TEST_PREFIX) : -len(TEST_SUFFIX)]
            text = zf.read(name).decode("utf-8")
            for i, rec in enumerate(csv.reader(io.StringIO(text, newline=""))):
                if len(rec) != 6 or rec[5] not in ("A", "B", "C", "D"):
                    raise ValueError(f"{name} row {i}: expected question,A,B,C,D,letter")
                rows.append(
                    {
                        "id": f"{subject}/{i}",
                        "subject": subject,
                        "question": rec[0],
                        "choices": rec[1:5],
                        "answer": rec[5],
                    }
                )
    return rows


def draw_key(seed: int, row_id: str) -> str:
    return hashlib.sha256(f"{seed}:{row_id}".encode()).hexdigest()


def draw(rows: list[dict], seed: int = SEED, n: int = N) -> list[dict]:
    """The n rows with the smallest keys, in their original order."""
    if n > len(rows):
        raise ValueError(f"cannot draw {n} of {len(rows)} rows")
    order = sorted(range(len(rows)), key=lambda i: draw_key(seed, rows[i]["id"]))
    keep = sorted(order[:n])
    return [rows[i] for i in keep]


def serialise(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zip", type=Path, default=DEFAULT_ZIP)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--n", type=int, default=N)
    ap.add_argument("--check", action="store_true", help="verify instead of writing")
    args = ap.parse_args(argv)

    rows = read_test_rows(args.zip)
    sample = serialise(draw(rows, args.seed, args.n))
    digest = hashlib.sha256(sample).hexdigest()
    if not args.check:
        args.out.write_bytes(sample)
        print(f"wrote {args.n} of {len(rows)} rows to {args.out} (sha256 {digest})")
        return 0

    prov = json.loads((HERE / "PROVENANCE.json").read_text())
    problems = []
    full = hashlib.sha256(serialise(rows)).hexdigest()
    if full != prov["files"]["mmlu_test_all.jsonl"]["sha256"]:
        problems.append(f"all-rows serialisation sha256 {full} differs from upstream provenance")
    want = prov["vendored"]["files"][args.out.name]["sha256"]
    if digest != want:
        problems.append(f"drawn sample sha256 {digest} != PROVENANCE {want}")
    if args.out.exists() and args.out.read_bytes() != sample:
        problems.append(f"{args.out} differs from the draw")
    for p in problems:
        print("draw_sample: " + p, file=sys.stderr)
    if not problems:
        print(f"ok: {args.n} of {len(rows)} rows, seed {args.seed}, sha256 {digest}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
