"""The vendored MMLU sample is exactly the registered draw from the vendored zip."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys

from harness import paths
from harness.workloads import load_items, provenance
from harness.workloads.data import MMLU_DRAW_N, MMLU_DRAW_SEED, mmlu_draw_key

SCRIPT = paths.WORKLOADS_DIR / "mmlu" / "draw_sample.py"


def _script_module():
    spec = importlib.util.spec_from_file_location("draw_sample", SCRIPT)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_seed_and_rule_agree_everywhere():
    draw = provenance("mmlu")["vendored"]["draw"]
    mod = _script_module()
    assert draw["seed"] == mod.SEED == MMLU_DRAW_SEED
    assert draw["n"] == mod.N == MMLU_DRAW_N == 1000
    assert draw["population"] == 14042
    for row_id in ("anatomy/0", "world_religions/170"):
        assert mod.draw_key(MMLU_DRAW_SEED, row_id) == mmlu_draw_key(row_id)


def test_the_script_reproduces_the_vendored_sample(tmp_path):
    mod = _script_module()
    rows = mod.read_test_rows(paths.WORKLOADS_DIR / "mmlu" / "source" / "mmlu.zip")
    assert len(rows) == 14042
    # The same serialisation of every row is the upstream provenance's derived file.
    assert (
        hashlib.sha256(mod.serialise(rows)).hexdigest()
        == (provenance("mmlu")["files"]["mmlu_test_all.jsonl"]["sha256"])
    )
    sample = mod.serialise(mod.draw(rows))
    vendored = (paths.WORKLOADS_DIR / "mmlu" / "mmlu_test_sample.jsonl").read_bytes()
    assert sample == vendored
    assert [f"mmlu:{r['id']}" for r in mod.draw(rows)] == [it.id for it in load_items("mmlu")]
    # A different seed draws a different sample (the seed matters).
    assert mod.draw(rows, seed=MMLU_DRAW_SEED + 1) != mod.draw(rows)


def test_the_script_check_mode_passes():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok: 1000 of 14042 rows" in proc.stdout
