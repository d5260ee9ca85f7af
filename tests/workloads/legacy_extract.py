"""The answer extraction code as it was before each task's extraction steps were
declared in its task.yaml: harness/workloads/extract.py as of that change, kept
unchanged so tests/workloads/test_steps.py can check that every declared pipeline
reads exactly what this code read. Do not edit it: it is the reference.
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


def _fmt(value: Fraction) -> str:
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


def extract_gsm8k(response: str) -> tuple[str | None, str]:
    """(extracted number as text, rule used). Rule: boxed, answer-phrase, last-number, none."""
    text = strip_think(response)
    boxed = last_boxed(text)
    if boxed is not None:
        value = normalize_number(boxed)
        if value is not None:
            return _fmt(value), "boxed"
    phrase_value = None
    for m in _ANSWER_PHRASE.finditer(text):
        tail = text[m.end() : m.end() + 80]
        tail = tail.replace("{,}", "").replace("\\$", "$").replace("\u2212", "-")
        nm = _PHRASE_NUMBER.match(tail)
        if nm:
            v = normalize_number(nm.group(1).replace(" ", ""))
            if v is not None:
                phrase_value = v
    if phrase_value is not None:
        return _fmt(phrase_value), "answer-phrase"
    cleaned = text.replace("{,}", "").replace("\u2212", "-")
    nums = _NUMBER.findall(cleaned)
    if nums:
        value = _to_fraction(nums[-1])
        if value is not None:
            return _fmt(value), "last-number"
    return None, "none"


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

MMLU_ANSWER = re.compile(
    r"(?i:answer)[ \t]*:[ \t]*(?:\*\*)?[ \t]*\$?\(?([A-D])\)?\$?(?![A-Za-z0-9])"
)


def extract_mmlu(response: str) -> str | None:
    """The letter of the last 'Answer: X' line, or None."""
    text = strip_think(response)
    found = MMLU_ANSWER.findall(text)
    return found[-1] if found else None


# --------------------------------------------------------------------------- code

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(response: str) -> str:
    """First ```python block, else first unlabelled block, else the whole reply."""
    text = strip_think(response)
    unlabelled = None
    for m in _FENCE.finditer(text):
        lang = m.group(1).lower()
        if lang in ("python", "py", "python3"):
            return m.group(2)
        if lang == "" and unlabelled is None:
            unlabelled = m.group(2)
    if unlabelled is not None:
        return unlabelled
    return text


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
