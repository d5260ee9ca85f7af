"""A reference of an argparse parser: a section per command and nested verb, with its
usage and a row per argument."""

from __future__ import annotations

import argparse
from pathlib import Path

from scripts.docgen import ROOT, cell


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) for each subcommand, in the order they were added."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def _help_text(action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    return action.help % params


def _argument_row(action: argparse.Action) -> str:
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (
                "{" + ",".join(map(str, action.choices)) + "}"
                if action.choices
                else action.dest.upper()
            )
            name += (
                f" {metavar}"
                if action.nargs is None
                else f" [{metavar}]"
                if action.nargs == "?"
                else f" {metavar} ..."
            )
    else:
        name = str(action.metavar or action.dest)  # a tuple metavar is for options only
        if action.choices:
            name += " (" + ", ".join(map(str, action.choices)) + ")"
    default = action.default
    if isinstance(default, Path) and default.is_relative_to(ROOT):
        default = default.relative_to(ROOT)  # the repository's folder, not this checkout's
    shown = (
        "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
    )
    return f"| `{cell(name)}` | {cell(_help_text(action))} | {cell(shown)} |"


def _usage(parser: argparse.ArgumentParser) -> str:
    fmt = argparse.HelpFormatter(parser.prog, width=96)
    fmt.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return fmt.format_help().strip()


def command_reference(parser: argparse.ArgumentParser, heading: str = "##") -> str:
    """A section per command (nested verbs under it): its usage, what it does, and a
    table of its arguments with their help and defaults."""
    out: list[str] = []

    def command(name: str, help_: str, sub: argparse.ArgumentParser, level: str) -> None:
        out.extend([f"{level} `{sub.prog}` {{#{sub.prog.replace(' ', '-')}}}", ""])
        text = sub.description or help_
        if text:
            out.extend([text[0].upper() + text[1:] + ("" if text.endswith(".") else "."), ""])
        out.extend(["```text", _usage(sub), "```", ""])
        rows = [
            a
            for a in sub._actions
            if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
        ]
        if rows:
            out.extend(
                [
                    "| argument | what it does | default |",
                    "|---|---|---|",
                    *map(_argument_row, rows),
                    "",
                ]
            )
        for verb, verb_help, verb_parser in _subcommands(sub):
            command(verb, verb_help, verb_parser, level + "#")

    for name, help_, sub in _subcommands(parser):
        command(name, help_, sub, heading)
    return "\n".join(out)
