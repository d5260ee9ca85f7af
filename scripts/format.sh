#!/usr/bin/env bash
# Reformat the tree with ruff's formatter ([tool.ruff.format] in pyproject.toml), the
# folders scripts/lint.sh checks, then let the linter fix what the reformat moved (import
# order). Run it once as a commit of its own with nothing else in it; after that,
# scripts/lint.sh's format check holds the tree to it.
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(harness tests benchmarks scripts)
.venv/bin/ruff format "${paths[@]}"
.venv/bin/ruff check --fix --quiet "${paths[@]}"
