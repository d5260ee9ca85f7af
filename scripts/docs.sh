#!/usr/bin/env bash
# Build the docs site (mkdocs.yml, or the config given) with --strict into a scratch folder,
# as scripts/test.sh does: a broken link or anchor, a page left out of the nav, or a
# generated reference that cannot be written fails it, and only then is its log printed.
# (Not `mkdocs build --quiet`: it hides the very warnings --strict counts, and passes.)
# To read the site as you edit it: .venv/bin/mkdocs serve
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-mkdocs.yml}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if ! NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -f "$config" \
    --site-dir "$scratch/site" > "$scratch/log" 2>&1; then
  grep -v '^INFO' "$scratch/log" >&2 || true
  echo "docs.sh: mkdocs build --strict failed (above)" >&2
  exit 1
fi
