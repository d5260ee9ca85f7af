"""Parse engine commands with the engine's own parser and configuration checks, as far
as they go without the model's files or a GPU. Run by an engine environment's interpreter
(harness/engines/probe/engine_parse.py; the harness imports its constants only): reads
{"engine", "commands": [{"name", "argv", "env"}]} on stdin (argv: what follows the
interpreter's module) and prints one JSON line after PARSE_RESULT_MARKER: per command
`ok`, `problem` in the engine's words, and `checked`. A flag must be exact (argparse takes a unique prefix).

vLLM 0.32: `vllm serve`'s parser (entrypoints/cli/main.py), its validate,
AsyncEngineArgs.from_cli_args, the whole SpeculativeConfig for a drafter without weights,
else its fields and _verify_args (its __post_init__ reads the draft's and the target's
configs), a k schedule through build_dynamic_sd_schedule_lookup. SGLang 0.5.23:
prepare_server_args, SpeculativeAlgorithm.from_string, the SGLANG_* variables in
sglang.srt.environ; not resolve_once, which reads the model's config."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

# Run as a script, this file's folder (harness/engines/probe) heads sys.path: drop it so
# nothing in the harness shadows the engine's own modules.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

# Defined here, where the engine's interpreter reads them; the harness imports them.
PARSE_RESULT_MARKER = "specbench-parse-result"
# vLLM's speculative methods without draft weights of their own.
WEIGHTLESS_METHODS = {"ngram", "ngram_gpu", "suffix"}


def _argparse(parse, argv: list[str]):
    """parse(argv), an argparse failure (SystemExit) turned into its message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parse(argv), None
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        return None, (lines[-1] if lines else "the parser exited")


def _inexact(parser, argv: list[str]) -> str | None:
    """A flag argparse took only as an abbreviation of another (it allows a unique
    prefix), as argparse says an unknown one."""
    known = set(parser._option_string_actions)
    flags = [a.split("=", 1)[0] for a in argv if a.startswith("--")]
    unknown = [f for f in flags if f not in known]
    return f"unrecognized arguments: {' '.join(unknown)} (not exact)" if unknown else None


def vllm_check(argv: list[str], env: dict) -> dict:
    # No device to infer on a machine without one: parse as the CPU platform does (the
    # flags and configs are the same source; a caller's setting wins).
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm.entrypoints.cli.serve as serve
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmds = {}
    for cmd in serve.cmd_init():
        cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
        cmds[cmd.name] = cmd
    args, problem = _argparse(parser.parse_args, argv)
    checked = ["vllm serve's argument parser"]
    problem = problem or _inexact(subparsers.choices["serve"], argv)
    if problem is not None:
        return {"ok": False, "problem": problem, "checked": checked}
    cmds[args.subparser].validate(args)
    engine = AsyncEngineArgs.from_cli_args(args)
    checked += ["serve's validate", "AsyncEngineArgs.from_cli_args"]
    spec = engine.speculative_config
    if not spec:
        return {"ok": True, "problem": None, "checked": checked}
    from vllm.config.speculative import SpeculativeConfig

    whole, post_init = spec.get("method") in WEIGHTLESS_METHODS, SpeculativeConfig.__post_init__
    if not whole:  # its __post_init__ reads the draft's and the target's configs
        SpeculativeConfig.__post_init__ = lambda self: None
    try:
        config = SpeculativeConfig(**spec)
    finally:
        SpeculativeConfig.__post_init__ = post_init
    checked.append(
        "SpeculativeConfig" + ("" if whole else " fields and _verify_args (not __post_init__)")
    )
    if config.num_speculative_tokens_per_batch_size is not None:
        from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

        build_dynamic_sd_schedule_lookup(
            config.num_speculative_tokens_per_batch_size,
            vllm_max_batch_size=engine.max_num_seqs or 256,
            vllm_num_speculative_tokens=config.num_speculative_tokens,
        )
        checked.append("the k schedule (build_dynamic_sd_schedule_lookup)")
    return {"ok": True, "problem": None, "checked": checked}


def sglang_check(argv: list[str], env: dict) -> dict:
    import argparse

    from sglang.srt.environ import envs
    from sglang.srt.server_args import ServerArgs, prepare_server_args

    args, problem = _argparse(prepare_server_args, argv)
    checked = ["sglang.srt.server_args.prepare_server_args"]
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)  # as prepare_server_args builds it
    problem = problem or _inexact(parser, argv)
    if problem is not None:
        return {"ok": False, "problem": problem, "checked": checked}
    if args.speculative_algorithm is not None:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        SpeculativeAlgorithm.from_string(args.speculative_algorithm)
        checked.append("SpeculativeAlgorithm.from_string")
    unknown = [k for k in env if k.startswith("SGLANG_") and not hasattr(envs, k)]
    if unknown:
        return {
            "ok": False,
            "problem": f"unknown to sglang.srt.environ: {unknown}",
            "checked": checked,
        }
    checked += ["its SGLANG_* variables in sglang.srt.environ"] if env else []
    return {"ok": True, "problem": None, "checked": checked}


def main() -> None:
    request = json.load(sys.stdin)
    check = {"vllm": vllm_check, "sglang": sglang_check}[request["engine"]]
    out = {}
    for command in request["commands"]:
        try:
            out[command["name"]] = check(command["argv"], command.get("env") or {})
        except Exception as err:  # the engine's own refusal, in its words
            out[command["name"]] = {
                "ok": False,
                "checked": [],
                "problem": f"{type(err).__name__}: {err}"[:2000],
            }
    print(PARSE_RESULT_MARKER, json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
