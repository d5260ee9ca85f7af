"""Answer extraction from model replies: the pieces each task's scorer is built from.

Which pieces a task uses, in which order, is declared in its
``workloads/<kind>/task.yaml`` (``scorer.extract``) and run by
harness/workloads/steps.py; the functions here are the pure, total text
operations those named steps call. None of them raises on odd text; each returns
None when nothing matches.

Conventions (workloads/README.md; shared/datasets/README.md):

* Reasoning blocks: a complete ``<think>...</think>`` block is removed before
  extraction, and an unterminated ``<think>`` cuts the reply there (the model
  never reached an answer). Thinking is normally off for these tasks; this only
  keeps a stray block's scratch numbers from being read as the answer.
* GSM8K: the last ``\\boxed{...}`` (brace-matched), else the last
  "final answer is X" / "answer is X" / "answer: X", else the last number in the
  reply. The value is normalised (commas, ``$``, LaTeX spacing and units removed,
  ``\\frac{a}{b}`` read as a/b) and compared with the gold number exactly as a
  rational, so "18", "18.00", "$18" and "\\boxed{18 \\text{ dollars}}" all equal 18.
* MMLU: the README's ``(?i)Answer[ \\t]*:[ \\t]*\\$?([A-D])\\$?`` with three
  guards: the letter must be upper case and must not run on into a word (so
  "Answer: Both" is not read as B), and bold/parentheses around it are allowed
  ("**Answer: (C)**"). The last match wins; no match is wrong.
* HumanEval: the first fenced block labelled python/py/python3, else the first
  unlabelled fenced block, else the whole reply.

These are the rules the declared steps (harness/workloads/steps.py) are built from;
``harness.workloads.declared`` runs a task's declared steps on one reply.
"""

from __future__ import annotations

import re
from decimal import Decimal, localcontext
from fractions import Fraction

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)


def strip_think(text: str) -> str:
    """Remove <think>...</think> blocks; cut at an unterminated <think>."""
    text = _THINK_BLOCK.sub("", text)
    m = _THINK_OPEN.search(text)
    if m:
        text = text[: m.start()]
    return text


# --------------------------------------------------------------------------- GSM8K

# A number: optional sign (only where a minus cannot be a hyphen or subtraction
# between two operands), thousands groups or plain digits, optional decimals;
# also a bare decimal like ".5".
_NUMBER = re.compile(
    r"(?:(?<![\w)\]}.])-)?"  # sign
    r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
)
_ANSWER_PHRASE = re.compile(r"answer\s*(?:is|:|=)", re.IGNORECASE)
_PHRASE_NUMBER = re.compile(r"[\s:=$*\\(\[]*(-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:\s*/\s*\d+)?)")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mathbf|operatorname|mbox)\s*\{([^{}]*)\}")
_LATEX_NOISE = re.compile(r"\\[,;:! ]|\\left|\\right|\\%|%|\\\$|\$|\\quad|\\qquad|~")


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces matched; None if none."""
    best = None
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth = 1
        i = m.end()
        while i < len(text) and depth:
            c = text[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            i += 1
        if depth == 0:
            best = text[m.end() : i - 1]
    return best


def _to_fraction(token: str) -> Fraction | None:
    token = token.replace(",", "")
    try:
        return Fraction(token)
    except (ValueError, ZeroDivisionError):
        return None


def format_number(value: Fraction) -> str:
    """Canonical text of a number: integer, terminating decimal, or a/b."""
    if value.denominator == 1:
        return str(value.numerator)
    d = value.denominator
    for f in (2, 5):
        while d % f == 0:
            d //= f
    if d == 1:
        with localcontext() as ctx:
            ctx.prec = 60
            text = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
        return text.rstrip("0").rstrip(".")
    return f"{value.numerator}/{value.denominator}"


def normalize_number(text: str) -> Fraction | None:
    """A number from a short answer string (boxed content or a phrase tail).

    LaTeX fractions become a/b; `{,}` thousands separators, commas, `$`, `%`,
    spacing commands and \\text{...} units are removed; then the whole string if
    it is a number, else its last number.
    """
    s = text.replace("{,}", "")
    s = _TEXT_CMD.sub(lambda m: f" {m.group(1)} ", s)
    s = _FRAC.sub(lambda m: f"({m.group(1)})/({m.group(2)})", s)
    s = _LATEX_NOISE.sub("", s)
    s = s.replace("\u2212", "-")  # Unicode minus
    s = s.strip().rstrip(".")
    # A plain a/b fraction, possibly parenthesised: "(3)/(4)", "3/4", "-3/4".
    m = re.fullmatch(r"\(?\s*(-?[\d.,]+)\s*\)?\s*/\s*\(?\s*(-?[\d.,]+)\s*\)?", s)
    if m:
        num, den = _to_fraction(m.group(1)), _to_fraction(m.group(2))
        if num is not None and den not in (None, 0):
            return num / den
    whole = _to_fraction(s.replace(" ", "")) if re.fullmatch(r"-?[\d,. ]+", s or "x") else None
    if whole is not None:
        return whole
    nums = _NUMBER.findall(s)
    if not nums:
        return None
    return _to_fraction(nums[-1])


def answer_phrase_number(text: str) -> str | None:
    """The number after the last "answer is" / "answer:" / "answer =" (within 80
    characters, LaTeX and currency marks skipped) whose value can be read; None if none."""
    found = None
    for m in _ANSWER_PHRASE.finditer(text):
        tail = text[m.end() : m.end() + 80]
        tail = tail.replace("{,}", "").replace("\\$", "$").replace("\u2212", "-")
        nm = _PHRASE_NUMBER.match(tail)
        if nm:
            token = nm.group(1).replace(" ", "")
            if normalize_number(token) is not None:
                found = token
    return found


def last_number_token(text: str) -> str | None:
    """The last number in the text (``{,}`` separators removed, Unicode minus read
    as '-'), as written; None if there is none."""
    cleaned = text.replace("{,}", "").replace("\u2212", "-")
    nums = _NUMBER.findall(cleaned)
    if nums and _to_fraction(nums[-1]) is not None:
        return nums[-1]
    return None


def gsm8k_gold(answer_field: str) -> str:
    """The gold number: text after '####', commas removed."""
    if "####" not in answer_field:
        raise ValueError("GSM8K answer has no '####'")
    gold = answer_field.rsplit("####", 1)[1].strip().replace(",", "")
    if _to_fraction(gold) is None:
        raise ValueError(f"GSM8K gold answer is not a number: {gold!r}")
    return gold


def gsm8k_equal(extracted: str | None, gold: str) -> bool:
    """Exact rational comparison of an extracted number with the gold answer."""
    if extracted is None:
        return False
    a = _to_fraction(extracted.replace("$", ""))
    b = _to_fraction(gold.replace("$", ""))
    return a is not None and b is not None and a == b


# --------------------------------------------------------------------------- MMLU

# The pattern mmlu/task.yaml's `regex` step declares (a test checks the two agree).
MMLU_ANSWER = re.compile(
    r"(?i:answer)[ \t]*:[ \t]*(?:\*\*)?[ \t]*\$?\(?([A-D])\)?\$?(?![A-Za-z0-9])"
)


# --------------------------------------------------------------------------- code

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def fenced_block(text: str, languages: tuple[str, ...]) -> str | None:
    """Body of the first fenced block whose language tag (lower-cased; '' when it has
    none) is one of `languages`; an unclosed fence runs to the end. None if none."""
    for m in _FENCE.finditer(text):
        if m.group(1).lower() in languages:
            return m.group(2)
    return None


def defines_function(code: str, name: str) -> bool:
    return (
        re.search(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", code, re.MULTILINE)
        is not None
    )


def humaneval_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """prompt + completion + test + check(entry_point); a completion that defines
    the entry point is run as is, without the prompt."""
    body = completion if defines_function(completion, entry_point) else prompt + completion
    return body + "\n" + test + "\n" + f"check({entry_point})\n"
