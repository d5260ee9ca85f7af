"""The one small interface every engine kind implements.

An engine kind turns an arm into the command that starts the engine, the
environment it needs, the extra request fields it understands, and says which
metrics dialect its /metrics speaks. The harness never imports an engine: it
runs the arm's interpreter or command as a process.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from harness.dialects import Dialect
from harness.errors import InputError

if TYPE_CHECKING:
    from harness.prereg.schema import Arm, Study

# Printed by every kind's version probe: "<marker> <version>" on one line, so the
# answer is found among whatever else the interpreter prints while importing.
VERSION_MARKER = "specbench-engine-version"
_VERSION_LINE = re.compile(rf"^{VERSION_MARKER} (\S+)\s*$", re.MULTILINE)


def version_probe_code(module: str, also: Iterable[str] = ()) -> str:
    """`python -c` source that imports the engine (and `also`, what its server imports
    at start) and prints its version after VERSION_MARKER."""
    imports = "".join(f"import {m}; " for m in also)
    return (
        f"import {module} as _e; {imports}"
        f"print({VERSION_MARKER!r}, getattr(_e, '__version__', 'unknown'))"
    )


_BARE_VERSION = re.compile(r"^(\d+\.\d+[\w.+-]*)\s*$", re.MULTILINE)


class EngineKind(ABC):
    """What specbench needs to know to drive one kind of inference engine."""

    name: ClassVar[str]
    metrics_dialect: ClassVar[Dialect]
    readiness_path: ClassVar[str] = "/health"
    # Serves on a GPU of this host: a study with such an arm must have its revisions
    # pinned (harness/prereg/pins.py) before `specbench run` spends GPU time on it, and
    # the doctor's "no GPU" is a blocker for it.
    gpu: ClassVar[bool] = False
    # The harness's own scripted test engine: an arm of this kind declares the engine's
    # model (`Arm.scripted`, required there and refused elsewhere), so it has no weights
    # to fetch, pin or check and no torch to calibrate with. Every other question about
    # such an arm asks `arm.scripted is not None`.
    scripted_spec: ClassVar[bool] = False
    # The importable module and the version the flags were checked against; a
    # version matches when it equals this or starts with it followed by a dot.
    engine_module: ClassVar[str]
    # Modules the engine's server imports at start, imported by the version probe too:
    # a broken environment (a missing CUDA library, a mismatched kernel package) then
    # fails pre-flight and `engines install`, not the first GPU start.
    server_modules: ClassVar[tuple[str, ...]] = ()
    expected_version: ClassVar[str | None] = None
    # The distribution whose version names this kind's build in its environment's
    # package list (the cells' `where.engine_versions`); None: none does.
    distribution: ClassVar[str | None] = None
    # The flag that sets the share of a GPU's memory the engine claims, and the share it
    # claims without it (None: it checks free memory itself); the doctor compares the
    # largest against the GPU's free memory (harness/doctor/gpu_checks.py).
    memory_fraction_flag: ClassVar[str | None] = None
    default_memory_fraction: ClassVar[float | None] = None

    @abstractmethod
    def command(self, arm: Arm, study: Study, host: str, port: int) -> list[str]:
        """The full argv that starts this arm's engine listening on host:port."""

    # The engine's entry point after its interpreter (`python -m ...`), and the engine's
    # name in an error; a kind without one has no parser specbench reads flags with.
    entry_point: ClassVar[tuple[str, ...]] = ()
    display_name: ClassVar[str] = ""

    def prefix(self, arm: Arm) -> list[str]:
        """What precedes the engine's own flags in `command` (its interpreter and entry
        point, or the arm's launch.command): the rest is what its parser reads."""
        if not self.entry_point:
            raise NotImplementedError(f"engine {self.name!r} has no parser to read its flags")
        launch = arm.launch
        if launch is not None and launch.command:
            return list(launch.command)
        python = self.interpreter(arm)
        if python is None:
            raise ValueError(
                f"arm {arm.name!r}: launch needs python or command for {self.display_name}"
            )
        return [python, *self.entry_point]

    def environment(self, arm: Arm) -> dict[str, str]:
        """Variables added over os.environ for the engine process (the arm's own win)."""
        return dict(arm.launch.env) if arm.launch is not None else {}

    def request_fields(self, arm: Arm, study: Study) -> dict[str, Any]:
        """Extra JSON body fields for /v1/chat/completions on this engine."""
        fields: dict[str, Any] = {}
        if study.model.chat_template_kwargs:
            fields["chat_template_kwargs"] = dict(study.model.chat_template_kwargs)
        return fields

    def method_problem(self, arm: Arm) -> str | None:
        """Why this kind cannot start the arm's drafter method at all (known from the
        engine's own code); None: it can, or the engine's parser decides at start."""
        return None

    def synthetic_problem(self, arm: Arm) -> str | None:
        """Why this kind cannot run the arm's synthetic acceptance (drafter.synthetic);
        None: it can, and its command or environment carries it."""
        return f"engine {self.name!r} has no synthetic acceptance setting specbench knows"

    def resolved_settings(self, arm: Arm, study: Study) -> dict[str, str]:
        """Settings that change what an arm measures and that the engine would otherwise
        decide by itself, as this kind resolves them, in words: shown by pre-flight and
        `serve --print-command`, kept in the manifest (EngineInfo.settings), in the report."""
        settings = {"drafter_precision": self.drafter_precision(arm, study)} if arm.drafter else {}
        if arm.drafter is not None and arm.drafter.synthetic is not None:
            settings["acceptance"] = (
                f"control arm: {arm.drafter.synthetic.label(arm.drafter.num_draft_tokens)},"
                " whatever the drafts say (drafter.synthetic); never judged"
            )
        if arm.launch is not None and arm.launch.dtype is not None:
            settings["dtype"] = self.dtype_setting(arm)
        return settings

    def engine_round(self, arm: Arm, async_scheduling: str | None = None) -> str:
        """What the engine's acceptance figures (drafts counter, per-request rounds) are per
        for this drafter arm; `async_scheduling`: the setting its engine chose, if known."""
        return "decode step"

    def chosen_settings(self, arm: Arm, log: list[str], command: list[str]) -> dict[str, str]:
        """Settings the engine chose by itself, read from its startup log once it is
        ready (harness/engines/launch/chosen_settings.py); merged over resolved_settings."""
        return {}

    def dtype_for(self, arm: Arm) -> str | None:
        """The --dtype this arm's engine is started with (None: the engine decides)."""
        return arm.launch.dtype if arm.launch is not None else None

    def dtype_setting(self, arm: Arm) -> str:
        """launch.dtype as resolved, in words."""
        return f"{self.dtype_for(arm)} (launch.dtype)"

    def drafter_precision(self, arm: Arm, study: Study) -> str:
        """The draft weights' precision as this engine will load them."""
        d = arm.drafter
        if d is None:
            return "none (no drafter)"
        return "checkpoint's own" if d.quantization == "checkpoint" else d.quantization

    def speculation_gate(self, arm: Arm, up_to: int | None) -> str:
        """The engine setting that would switch this drafter off above `up_to` users
        (None: it never paid) in a deployment, or why there is none."""
        return f"{self.name}: no batch-size gate for speculation known to specbench"

    def k_schedule_problem(self, arm: Arm) -> str | None:
        """Why this kind cannot run a drafter's k schedule (drafter.k_schedule); None:
        it can, and its command carries it (k_schedule_setting says how)."""
        return f"engine {self.name!r} has no per-batch-size k schedule specbench knows"

    def k_schedule_setting(self, arm: Arm, ranges: list[tuple[int, int | None, int]]) -> str:
        """The engine's own setting for draft tokens by running batch size: inclusive
        (first, last, k) ranges from batch 1, the last open (None), k = 0 drafting
        nothing; or why this engine has none."""
        return f"{self.name}: no per-batch-size k schedule known to specbench"

    def dialect_for(self, arm: Arm) -> Dialect:
        """The /metrics dialect this arm's engine speaks (a kind may decide per arm)."""
        return self.metrics_dialect

    @abstractmethod
    def effective_max_running(self, arm: Arm) -> int | None:
        """The running-request cap the engine will use; None when the engine sizes
        it itself from memory (no fixed default specbench knows of)."""

    def interpreter(self, arm: Arm) -> str | None:
        """The engine environment's python, when the arm names one."""
        return arm.launch.python if arm.launch is not None else None

    def version_command(self, arm: Arm) -> list[str]:
        """A command that imports the engine and prints its version after VERSION_MARKER."""
        python = self.interpreter(arm)
        if python is None:
            raise ValueError(f"arm {arm.name!r}: no interpreter to probe the engine version with")
        return self.probe_command(python)

    def probe_command(self, python: str) -> list[str]:
        """`python -c` that imports the engine module and prints its version."""
        return [python, "-c", version_probe_code(self.engine_module, self.server_modules)]

    def version_matches(self, version: str) -> bool:
        want = self.expected_version
        return want is None or version == want or version.startswith(want + ".")

    def served_model(self, study: Study) -> str:
        return study.model.request_name


def parse_version_output(text: str) -> str | None:
    """The version a version_command printed (a marked line, else a bare `0.32.0`
    line as `vllm --version` prints), or None."""
    found = _VERSION_LINE.findall(text)
    if found:
        return found[-1]
    bare = _BARE_VERSION.findall(text)
    return bare[-1] if bare else None


def option_value(args: list[str], flag: str) -> str | None:
    """The value of `flag` in an argv list (`--flag V` or `--flag=V`); the last wins."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def int_option(args: list[str], flag: str) -> int | None:
    raw = option_value(args, flag)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def looks_like_local_path(model: str) -> bool:
    """Absolute, home- or dot-relative paths are local; `org/name` is a hub id."""
    return model.startswith(("/", "./", "../", "~")) or Path(model).is_absolute()


def compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: str, environ: Mapping[str, str], missing: set[str]) -> str:
    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name not in environ:
            missing.add(name)
            return match.group(0)
        return environ[name]

    return _VARIABLE.sub(sub, value)


def _machine_environment() -> dict[str, str]:
    # The engine interpreters' variables default to the venvs engines.lock.toml pins.
    from harness.engines.install.pins import machine_environment

    return machine_environment()


def expand_arm(arm: Arm, environ: Mapping[str, str] | None = None) -> tuple[Arm, list[str]]:
    """The arm with `${VAR}` in its launch fields and drafter model replaced from the
    environment (by default this machine's: os.environ over the pinned engine
    interpreters, harness/engines/install/pins.py), and the names of variables that are not
    set (left unexpanded)."""
    env = _machine_environment() if environ is None else environ
    missing: set[str] = set()
    update: dict[str, Any] = {}
    launch = arm.launch
    if launch is not None:
        changes: dict[str, Any] = {
            "env": {k: _expand(v, env, missing) for k, v in launch.env.items()},
            "extra_args": [_expand(a, env, missing) for a in launch.extra_args],
        }
        if launch.python is not None:
            changes["python"] = _expand(launch.python, env, missing)
        if launch.command is not None:
            changes["command"] = [_expand(a, env, missing) for a in launch.command]
        update["launch"] = launch.model_copy(update=changes)
    if arm.drafter is not None and arm.drafter.model is not None:
        model = _expand(arm.drafter.model, env, missing)
        update["drafter"] = arm.drafter.model_copy(update={"model": model})
    return arm.model_copy(update=update), sorted(missing)


def expand_study(study: Study, environ: Mapping[str, str] | None = None) -> Study:
    """The study as executed on this machine: `${VAR}` replaced in the model id and in
    every arm (expand_arm), from `environ` (by default this machine's, as expand_arm's).
    The one expander: `run`, `serve` and `rerun-baseline` use it, after the seal is taken
    over the text as written. Raises InputError naming the first unset variable and where
    it is used."""
    expanded, unset = _expanded(study, environ)
    if unset:
        where, names = unset[0]
        raise _unset(where, names[0])
    return expanded


def expand_study_leaving_unset(
    study: Study, environ: Mapping[str, str] | None = None
) -> tuple[Study, list[str]]:
    """expand_study for showing a command (`serve --print-command`, on a machine without
    the engines too): an unset `${VAR}` is left as written and named, not raised."""
    expanded, unset = _expanded(study, environ)
    return expanded, sorted({name for _, names in unset for name in names})


def _expanded(
    study: Study, environ: Mapping[str, str] | None
) -> tuple[Study, list[tuple[str, list[str]]]]:
    """The study expanded, and where each unset variable is used, in the study's order."""
    env = _machine_environment() if environ is None else environ
    missing: set[str] = set()
    model = study.model.model_copy(update={"id": _expand(study.model.id, env, missing)})
    unset = [("model.id", sorted(missing))] if missing else []
    arms = []
    for arm in study.arms:
        expanded, names = expand_arm(arm, env)
        unset += [(f"arm {arm.name!r}", names)] if names else []
        arms.append(expanded)
    return study.model_copy(update={"arms": arms, "model": model}), unset


def _unset(where: str, name: str) -> InputError:
    return InputError(
        f"{where}: environment variable {name} is not set (it names a path on"
        " this machine; set it before running)"
    )
