"""SGLang's DeepGEMM kernels, compiled before the first engine start.

Read in the SGLang 0.5.23 wheel (python/sglang/...):
- srt/layers/deep_gemm_wrapper/compile_utils.py `_maybe_compile_deep_gemm_one_type_all`:
  a server whose FP8 GEMMs run on DeepGEMM (sm90+, SGLANG_ENABLE_JIT_DEEPGEMM on by
  default, configurer.py) JIT-compiles every kernel shape for all M up to its limit at
  start (SGLANG_JIT_DEEPGEMM_PRECOMPILE, on by default), and warns that this takes
  "typically 10-20 mins" unless `sglang.compile_deep_gemm` was run "with same args as
  `sglang.launch_server`". The kernels are cached in SGLANG_DG_CACHE_DIR, by default
  $SGLANG_CACHE_DIR/deep_gemm = ~/.cache/sglang/deep_gemm (srt/environ.py:1373, 1383).
- compile_deep_gemm.py: `python -m sglang.compile_deep_gemm` takes the server's
  arguments plus `--timeout` (default 3600 s), starts a server without CUDA graphs or
  torch.compile, sends one request once it answers, and stops it.
So `specbench engines warm sglang` runs that module with an arm's own launch flags (the
model, its revision and quantization, the arm's tensor-parallel size), and leaves a
marker that `specbench plan` reads to say whether the first SGLang start still compiles.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harness import paths
from harness.engines.install.pins import pin
from harness.engines.launch.base import option_value
from harness.errors import InputError

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study

COMPILE_MODULE = "sglang.compile_deep_gemm"
LAUNCH_MODULE = "sglang.launch_server"
# SGLang's own figure for a cold compile ("typically 10-20 mins"): the plan counts the middle.
COMPILE_ESTIMATE_S = 15 * 60
# compile_deep_gemm.py CompileArgs.timeout: its server must answer within this.
DEFAULT_TIMEOUT_S = 3600
# SGLang 0.5.23's tensor-parallel flag and its alias (arg_groups/fields/parallel.py:45-50);
# `--tp` is how SGLang's own docs abbreviate it (argparse accepts the unique prefix).
TP_FLAGS = ("--tp-size", "--tensor-parallel-size", "--tp")


def sglang_arms(study: Study) -> list[Arm]:
    """The arms whose SGLang engine specbench starts (attached ones are someone else's)."""
    return [a for a in study.arms if a.engine == "sglang" and a.launch is not None]


def warm_arm(study: Study, name: str | None = None) -> Arm:
    """The arm whose flags the compile runs with: `name`, else the first SGLang baseline
    (no drafter: the target's GEMMs are the FP8 ones; a drafter served as its checkpoint's
    BF16 adds none), else the first SGLang arm."""
    arms = sglang_arms(study)
    if name is not None:
        chosen = next((a for a in arms if a.name == name), None)
        if chosen is None:
            raise InputError(
                f"no SGLang arm named {name!r} that specbench starts"
                f" (SGLang arms: {', '.join(a.name for a in arms) or 'none'})"
            )
        return chosen
    if not arms:
        raise InputError("the study has no SGLang arm that specbench starts: nothing to warm")
    return next((a for a in arms if a.drafter is None), arms[0])


def arm_args(arm: Arm) -> list[str]:
    return list(arm.launch.extra_args) if arm.launch is not None else []


def tp_size(arm: Arm) -> int | None:
    """The arm's tensor-parallel size as its flags pass it (None: SGLang's default, 1)."""
    for flag in TP_FLAGS:
        value = option_value(arm_args(arm), flag)
        if value is not None:
            return int(value) if value.isdigit() else None
    return None


def compile_command(
    arm: Arm, study: Study, python: str, host: str, port: int, timeout_s: int = DEFAULT_TIMEOUT_S
) -> list[str]:
    """`python -m sglang.compile_deep_gemm` with the arm's launch flags (as `specbench run`
    would start it), `--tp-size 1` made explicit when the arm passes none, and --timeout."""
    from harness.engines import get_engine_kind

    kind = get_engine_kind("sglang")
    argv = kind.command(arm, study, host, port)
    flags = argv[len(kind.prefix(arm)) :]
    passed = any(option_value(flags, f) is not None for f in TP_FLAGS)
    tp = [] if passed else ["--tp-size", "1"]
    return [python, "-m", COMPILE_MODULE, *flags, *tp, "--timeout", str(timeout_s)]


def cache_dir(environ: dict[str, str] | os._Environ) -> Path:
    """Where the engine keeps DeepGEMM's compiled kernels (SGLang 0.5.23 srt/environ.py)."""
    explicit = environ.get("SGLANG_DG_CACHE_DIR")
    if explicit:
        return Path(os.path.expanduser(explicit))
    base = environ.get("SGLANG_CACHE_DIR") or "~/.cache/sglang"
    return Path(os.path.expanduser(base)) / "deep_gemm"


def warm_key(study: Study, arm: Arm) -> dict[str, str | int | None]:
    """What the compiled kernel shapes depend on: the SGLang release, the weights and how
    they are split over GPUs."""
    m = study.model
    return {
        "sglang": pin("sglang").version,
        "model": m.id,
        "revision": m.revision,
        "quantization": m.quantization,
        "tp_size": tp_size(arm) or 1,
    }


def marker_path(study: Study, arm: Arm) -> Path:
    key = json.dumps(warm_key(study, arm), sort_keys=True)
    return paths.CACHE_DIR / "deepgemm" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def write_marker(study: Study, arm: Arm, cache: Path, seconds: float) -> Path:
    path = marker_path(study, arm)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        **warm_key(study, arm),
        "arm": arm.name,
        "cache_dir": str(cache),
        "seconds": round(seconds, 1),
        "finished": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def warm_record(study: Study, arm: Arm) -> dict | None:
    """The marker of a finished warm for this model and tp on this machine, if its kernel
    cache is still there."""
    try:
        record = json.loads(marker_path(study, arm).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cache = Path(record.get("cache_dir", ""))
    return record if cache.is_dir() and any(cache.iterdir()) else None


def fp8_weights(study: Study) -> bool:
    m = study.model
    return (m.quantization or "").lower().startswith("fp8") or m.weight_bytes_per_param == 1


def plan_note(study: Study) -> tuple[str, float] | None:
    """For `specbench plan`: whether the first SGLang start includes DeepGEMM's compile,
    and the seconds it adds to the estimate (None: the study starts no SGLang engine)."""
    if not sglang_arms(study):
        return None
    if not fp8_weights(study):
        return (
            "the first SGLang start compiles no DeepGEMM FP8 kernels: the model's"
            " weights are not registered as FP8",
            0.0,
        )
    arm = warm_arm(study)
    record = warm_record(study, arm)
    tp = tp_size(arm) or 1
    if record is not None:
        return (
            f"the first SGLang start includes no DeepGEMM compile: `specbench engines warm"
            f" sglang` compiled the FP8 kernels for {study.model.id} at tp {tp} on this"
            f" machine ({record.get('finished', '?')}, cache {record['cache_dir']})",
            0.0,
        )
    return (
        f"the first SGLang start includes DeepGEMM's JIT compile of the FP8 kernels"
        f" ({study.model.id}, tp {tp}; SGLang 0.5.23: typically 10-20 min, counted here as"
        f" {COMPILE_ESTIMATE_S // 60} min): not warmed on this machine; run `specbench engines"
        " warm sglang` on the GPU host before the run",
        float(COMPILE_ESTIMATE_S),
    )
