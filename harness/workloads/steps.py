"""Named extraction steps: what a task.yaml's ``scorer.extract`` list may say, and
the code that runs it (in the manner of lm-evaluation-harness's filters).

A pipeline is a list of steps run in order on the model's reply. Each step is a
pure function of the text so far (plus its declared arguments) that returns new
text, or None for "no answer", which ends the pipeline. In task.yaml a step is
written as its bare name when it takes no arguments, else as a one-key mapping
``{name: {argument: value, ...}}``:

    extract:
      - strip_think
      - regex: {pattern: 'Answer: ([A-D])', group: 1, take: last}

``first_of`` tries branches (each a labelled list of steps) on the same text and
keeps the first that gives an answer; the label is reported as the rule that
read it (GSM8K's ``read by boxed``):

      - first_of:
          - {label: boxed, steps: [last_boxed, number]}
          - {label: last-number, steps: [last_number, number]}

A new step is one function here with ``@step(name)`` (and an arguments model when
it takes any). The registered steps are listed in ``STEPS``; workloads/README.md
describes each.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from harness.workloads import extract as ex


class Args(BaseModel):
    """A step's arguments, as task.yaml writes them (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class StepKind:
    name: str
    fn: Callable[[str, Any], str | None]  # (text, validated arguments or None) -> text | None
    args: type[Args] | None  # None: the step takes no arguments
    summary: str


STEPS: dict[str, StepKind] = {}
FIRST_OF = "first_of"  # the one combinator, run by run_steps itself


def step(name: str, args: type[Args] | None = None):
    """Register `fn(text, args) -> str | None` as the extraction step `name`."""

    def register(fn):
        if name in STEPS or name == FIRST_OF:
            raise RuntimeError(f"extraction step {name!r} is registered twice")
        summary = (fn.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        STEPS[name] = StepKind(name, fn, args, summary)
        return fn

    return register


# --------------------------------------------------------------------------- the steps


@step("strip_think")
def _strip_think(text: str, _: None) -> str:
    """Remove complete <think>...</think> blocks; cut the text at an unterminated <think>."""
    return ex.strip_think(text)


@step("last_boxed")
def _last_boxed(text: str, _: None) -> str | None:
    """The content of the last \\boxed{...} or \\fbox{...}, braces matched."""
    return ex.last_boxed(text)


@step("answer_phrase")
def _answer_phrase(text: str, _: None) -> str | None:
    """The number after the last "answer is" / "answer:" / "answer =" (within 80
    characters, case-insensitive, LaTeX and currency marks skipped)."""
    return ex.answer_phrase_number(text)


@step("last_number")
def _last_number(text: str, _: None) -> str | None:
    """The last number in the text, as written (thousands commas, sign, decimals)."""
    return ex.last_number_token(text)


@step("number")
def _number(text: str, _: None) -> str | None:
    """The text read as one number (commas, $, %, LaTeX spacing and \\text{} units
    removed, \\frac{a}{b} is a/b; else its last number), written canonically:
    integer, terminating decimal, or a/b."""
    value = ex.normalize_number(text)
    return None if value is None else ex.format_number(value)


class RegexArgs(Args):
    pattern: str  # Python `re` syntax; inline flags such as (?i) apply
    group: int | str = 0  # the group returned: a number or a name; 0 is the whole match
    take: Literal["first", "last"] = "first"  # which match, when several
    _compiled: re.Pattern = PrivateAttr()

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as err:
            raise ValueError(f"not a valid regular expression: {err}") from err
        return v

    @model_validator(mode="after")
    def _group_exists(self) -> RegexArgs:
        rx = re.compile(self.pattern)
        if isinstance(self.group, int):
            if not 0 <= self.group <= rx.groups:
                raise ValueError(f"group {self.group}: the pattern has {rx.groups} group(s)")
        elif self.group not in rx.groupindex:
            raise ValueError(f"group {self.group!r}: the pattern has no group of that name")
        self._compiled = rx
        return self


@step("regex", RegexArgs)
def _regex(text: str, args: RegexArgs) -> str | None:
    """The given group of the first (or last) match of a pattern."""
    found = None
    for m in args._compiled.finditer(text):
        found = m
        if args.take == "first":
            break
    return None if found is None else found.group(args.group)


class CodeBlockArgs(Args):
    # Language tags accepted, lower case; "" is a fence with no tag.
    languages: list[str] = Field(min_length=1)


@step("code_block", CodeBlockArgs)
def _code_block(text: str, args: CodeBlockArgs) -> str | None:
    """The body of the first ``` fenced block whose language tag is one of `languages`
    (an unclosed fence runs to the end of the text)."""
    return ex.fenced_block(text, tuple(args.languages))


# --------------------------------------------------------------------------- declared pipelines


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(err: ValidationError, prefix: str = "") -> str:
    """A pydantic error as one line: `field.path[i]: message; ...`."""
    lines = []
    for e in err.errors():
        loc = _where(tuple(prefix.split(".")) + tuple(e["loc"]) if prefix else tuple(e["loc"]))
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(lines)


class StepCall(BaseModel):
    """One step as task.yaml names it: `name`, or `{name: {arguments}}`, or
    `{first_of: [{label, steps}, ...]}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    args: Any = None  # the step's validated Args, or None
    first_of: list[Branch] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, v: Any) -> Any:
        if isinstance(v, StepCall):
            return v
        if isinstance(v, str):
            name, raw, given = v, None, False
        elif isinstance(v, dict) and len(v) == 1:
            ((name, raw),) = v.items()
            given = True
        else:
            raise ValueError(
                f"a step is a name, or a one-key mapping {{name: {{arguments}}}}; got {v!r:.120}"
            )
        if name == FIRST_OF:
            if not given:
                raise ValueError("first_of needs a list of {label, steps} branches")
            return {"name": name, "first_of": raw}
        if name not in STEPS:
            raise ValueError(
                f"unknown extraction step {name!r}; registered: {', '.join(known_steps())}"
            )
        kind = STEPS[name]
        if kind.args is None:
            if given:
                raise ValueError(f"step {name!r} takes no arguments (write it as a bare name)")
            return {"name": name}
        if not isinstance(raw, dict):
            raise ValueError(f"step {name!r} needs its arguments as a mapping")
        try:
            return {"name": name, "args": kind.args.model_validate(raw)}
        except ValidationError as err:
            raise ValueError(describe(err, name)) from None

    @model_validator(mode="after")
    def _shape(self) -> StepCall:
        if self.name == FIRST_OF:
            if not self.first_of:
                raise ValueError("first_of needs at least one branch")
            labels = [b.label for b in self.first_of]
            if len(set(labels)) != len(labels):
                raise ValueError(f"first_of branch labels must differ: {labels}")
        return self


class Branch(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(min_length=1)  # reported as the rule that read the answer
    steps: list[StepCall]  # may be empty: the text as it is


StepCall.model_rebuild()


def known_steps() -> list[str]:
    return sorted([*STEPS, FIRST_OF])


@dataclass(frozen=True)
class Extraction:
    value: str | None  # the answer (None: no answer)
    rule: str  # the label of the last first_of branch taken, else the last step's name;
    # "none" when there is no answer


def run_steps(steps: tuple[StepCall, ...] | list[StepCall], text: str) -> Extraction:
    """Run a declared pipeline on one reply."""
    value = text
    label = last = None
    for call in steps:
        if call.first_of is not None:
            for branch in call.first_of:
                got = run_steps(branch.steps, value)
                if got.value is not None:
                    value, label = got.value, branch.label
                    break
            else:
                return Extraction(None, "none")
        else:
            stepped = STEPS[call.name].fn(value, call.args)
            if stepped is None:
                return Extraction(None, "none")
            value, last = stepped, call.name
    return Extraction(value, label or last or "as-is")


class ScorerSection(BaseModel):
    """task.yaml's `scorer`: the scorer's name, its extraction steps, and how the
    extracted answer is compared (prose; the comparison is the scorer's code)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    extract: list[StepCall] = []
    compare: str | None = None
