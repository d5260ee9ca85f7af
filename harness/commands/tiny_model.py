"""`specbench tiny-model DIR [--seed S] [--pair] [--hub-repo ORG/NAME]`: write the tiny
offline test model, or (--pair) the demo's draft and target in DIR/draft and DIR/target;
--hub-repo also lays the model out in the hub cache as that repository, offline."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.engines.tiny.tiny_model import FILES, build_tiny_model
from harness.engines.tiny.tiny_pair import EAGLE3_DIR, TARGET_EXTRA_LAYERS, build_tiny_pair
from harness.errors import InputError
from harness.weights.cache import hub_cache_dir
from harness.weights.local_hub import add_to_hub_cache


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tiny-model",
        help="build a tiny random-weight Llama model (offline, seconds) for tests and the demo",
    )
    p.add_argument("dir", help="folder to write the model into (created if missing)")
    p.add_argument("--seed", type=int, default=0, help="weight seed; same seed, same bytes")
    p.add_argument(
        "--pair",
        action="store_true",
        help="build the demo's draft (DIR/draft), a target that computes the same function"
        " at several times its cost (DIR/target), and an EAGLE-3 head for it (DIR/eagle3)",
    )
    p.add_argument(
        "--extra-layers",
        type=int,
        default=TARGET_EXTRA_LAYERS,
        help="with --pair: the target's layers beyond the draft's",
    )
    p.add_argument(
        "--hub-repo",
        metavar="ORG/NAME",
        help="also copy the model into the hub cache (HF_HUB_CACHE, or --hub-cache)"
        " as this repository, refs/main at a commit named by its contents, so"
        " `specbench fetch` can be tried offline",
    )
    p.add_argument(
        "--hub-cache",
        type=Path,
        default=None,
        help="with --hub-repo: the hub cache folder (default: huggingface_hub's)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder")
    if args.hub_repo is not None and (args.pair or not _repo_id(args.hub_repo)):
        raise InputError(f"--hub-repo {args.hub_repo}: expected ORG/NAME, and no --pair")
    if args.extra_layers < 1:
        raise InputError("--extra-layers: expected at least 1")
    try:
        if args.pair:
            folders = list(build_tiny_pair(out, seed=args.seed, extra_layers=args.extra_layers))
        else:
            folders = [build_tiny_model(out, seed=args.seed)]
    except OSError as err:
        raise InputError(f"{out}: cannot write the model: {err}") from None
    if args.pair:
        folders.append(out / EAGLE3_DIR)
    for folder in folders:
        config = json.loads((folder / "config.json").read_text())
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"tiny model written to {folder} (seed {args.seed})")
        print(
            f"  {config['architectures'][0]}, {config['num_hidden_layers']} layers, hidden"
            f" {config['hidden_size']}, vocab {config['vocab_size']}, {size / 1e6:.1f} MB"
        )
    print(
        f"  files: {', '.join(FILES)}"
        + (f" ({EAGLE3_DIR}: config.json, model.safetensors)" if args.pair else "")
    )
    if args.hub_repo is not None:
        cache = args.hub_cache or hub_cache_dir()
        try:
            commit = add_to_hub_cache(folders[0], cache, args.hub_repo)
        except OSError as err:
            raise InputError(f"{cache}: cannot write the hub cache: {err}") from None
        print(f"hub cache {cache}: {args.hub_repo} at commit {commit} (refs/main)")
    return 0


def _repo_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts)
