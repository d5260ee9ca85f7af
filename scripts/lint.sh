#!/usr/bin/env bash
# The static checks, each a step of its own (scripts/test.sh runs this first, so CI does):
#   ruff check            harness/ tests/ benchmarks/ scripts/   ([tool.ruff.lint])
#   ruff format --check   the same folders                        ([tool.ruff.format])
#   mypy                  harness/ and tests/                     ([tool.mypy])
# Every step runs; each one that fails says so in one line, and the exit status is 1 if
# any did. --no-format leaves the format check out (a quick look at a change not yet
# formatted; scripts/format.sh formats the tree).
set -uo pipefail
cd "$(dirname "$0")/.."

check_format=1
for arg in "$@"; do
  case "$arg" in
    --no-format) check_format=0 ;;
    *) echo "lint.sh: unknown argument '$arg' (expected --no-format)" >&2; exit 2 ;;
  esac
done
if [ ! -x .venv/bin/ruff ] || [ ! -x .venv/bin/mypy ]; then
  echo "lint.sh: .venv/bin/ruff or .venv/bin/mypy is missing: run scripts/setup.sh" >&2
  exit 2
fi

paths=(harness tests benchmarks scripts)
failed=()
step() {  # step NAME HINT COMMAND...: run it, and name it with its hint if it fails
  local name=$1 hint=$2
  shift 2
  echo "== lint: $name"
  if ! "$@"; then
    echo "lint.sh: $name failed (above): $hint" >&2
    failed+=("$name")
  fi
}

step "ruff check" "\`.venv/bin/ruff check --fix ${paths[*]}\` fixes the import order and most others" \
  .venv/bin/ruff check "${paths[@]}"
if [ "$check_format" -eq 1 ]; then
  step "ruff format" "\`bash scripts/format.sh\` reformats the files" \
    .venv/bin/ruff format --check "${paths[@]}"
fi
step "mypy" "annotate or narrow at each line named (a targeted \`# type: ignore[code]\` only where a stub is wrong, with the reason)" \
  .venv/bin/mypy

if [ "${#failed[@]}" -gt 0 ]; then
  (IFS=";"; echo "lint.sh: failed: ${failed[*]}" >&2)
  exit 1
fi
echo "lint.sh: clean"
