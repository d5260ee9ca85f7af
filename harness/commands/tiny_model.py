"""`specbench tiny-model DIR [--seed S] [--pair]`: write the tiny offline test model,
or (--pair) the demo's draft and target in DIR/draft and DIR/target."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.engines.tiny_model import FILES, build_tiny_model
from harness.engines.tiny_pair import TARGET_EXTRA_LAYERS, build_tiny_pair
from harness.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tiny-model",
        help="build a tiny random-weight Llama model (offline, seconds) for tests and the demo",
    )
    p.add_argument("dir", help="folder to write the model into (created if missing)")
    p.add_argument("--seed", type=int, default=0, help="weight seed; same seed, same bytes")
    p.add_argument(
        "--pair", action="store_true",
        help="build the demo's draft (DIR/draft) and a target that computes the same function"
        " at several times its cost (DIR/target)",
    )
    p.add_argument("--extra-layers", type=int, default=TARGET_EXTRA_LAYERS,
                   help="with --pair: the target's layers beyond the draft's")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder")
    if args.extra_layers < 1:
        raise InputError("--extra-layers: expected at least 1")
    try:
        if args.pair:
            folders = list(build_tiny_pair(out, seed=args.seed, extra_layers=args.extra_layers))
        else:
            folders = [build_tiny_model(out, seed=args.seed)]
    except OSError as err:
        raise InputError(f"{out}: cannot write the model: {err}") from None
    for folder in folders:
        config = json.loads((folder / "config.json").read_text())
        size = sum((folder / f).stat().st_size for f in FILES)
        print(f"tiny model written to {folder} (seed {args.seed})")
        print(
            f"  {config['architectures'][0]}, {config['num_hidden_layers']} layers, hidden"
            f" {config['hidden_size']}, vocab {config['vocab_size']}, {size / 1e6:.1f} MB"
        )
    print(f"  files: {', '.join(FILES)}")
    return 0
