"""`specbench tiny-model DIR [--seed S]`: write the tiny offline test model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.engines.tiny_model import FILES, build_tiny_model
from harness.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tiny-model",
        help="build a tiny random-weight Llama model (offline, seconds) for tests and the demo",
    )
    p.add_argument("dir", help="folder to write the model into (created if missing)")
    p.add_argument("--seed", type=int, default=0, help="weight seed; same seed, same bytes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder")
    try:
        build_tiny_model(out, seed=args.seed)
    except OSError as err:
        raise InputError(f"{out}: cannot write the model: {err}") from None
    config = json.loads((out / "config.json").read_text())
    size = sum((out / f).stat().st_size for f in FILES)
    print(f"tiny model written to {out} (seed {args.seed})")
    print(
        f"  {config['architectures'][0]}, {config['num_hidden_layers']} layers, hidden"
        f" {config['hidden_size']}, vocab {config['vocab_size']}, {size / 1e6:.1f} MB"
    )
    print(f"  files: {', '.join(FILES)}")
    return 0
