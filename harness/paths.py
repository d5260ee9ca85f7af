"""Where the project's own files live (the package runs from a checkout)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(os.environ.get("SPECBENCH_HOME", Path(__file__).resolve().parent.parent))
WORKLOADS_DIR = PROJECT_ROOT / "workloads"
ARMS_DIR = PROJECT_ROOT / "arms"
RESULTS_DIR = PROJECT_ROOT / "results"
REPORTS_DIR = PROJECT_ROOT / "reports"
# Engine environments and built models are cached outside the checkout so CI and
# later sessions on the same machine reuse them.
CACHE_DIR = Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))
