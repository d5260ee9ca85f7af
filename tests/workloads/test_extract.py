"""Table-driven tests of answer extraction: GSM8K, MMLU and HumanEval code blocks."""

from __future__ import annotations

import pytest

from harness.workloads.declared import extract_code, extract_gsm8k, extract_mmlu
from harness.workloads.extract import (
    MMLU_ANSWER,
    defines_function,
    gsm8k_equal,
    gsm8k_gold,
    humaneval_program,
    last_boxed,
    strip_think,
)

# (response, extracted number, rule that found it)
GSM8K_CASES = [
    # \boxed{}, brace-matched, last one wins
    ("So she makes 9 * 2 = $18 every day.\n\\boxed{18}", "18", "boxed"),
    ("The answer is \\boxed{18}.", "18", "boxed"),
    ("First guess \\boxed{3}, corrected: \\boxed{4}", "4", "boxed"),
    ("$\\boxed{72}$", "72", "boxed"),
    ("\\(\\boxed{72}\\)", "72", "boxed"),
    ("\\boxed{{72}}", "72", "boxed"),
    ("The final answer is $\\boxed{1,080}$", "1080", "boxed"),
    ("\\boxed{6 \\text{ hours}} and then something 7", "6", "boxed"),
    ("\\fbox{9}", "9", "boxed"),
    # commas and thousands separators
    ("\\boxed{1,000}", "1000", "boxed"),
    ("\\boxed{1{,}000}", "1000", "boxed"),
    ("\\boxed{\\$1,234.50}", "1234.5", "boxed"),
    ("Total: 1,234,567 dollars", "1234567", "last-number"),
    ("Final Answer: $1,200", "1200", "answer-phrase"),
    # units, currency, percent, LaTeX
    ("\\boxed{\\$18.00}", "18", "boxed"),
    ("\\boxed{18 \\text{ dollars}}", "18", "boxed"),
    ("\\boxed{\\text{18 eggs}}", "18", "boxed"),
    ("\\boxed{50\\%}", "50", "boxed"),
    ("\\boxed{3.0}", "3", "boxed"),
    ("\\boxed{0.5}", "0.5", "boxed"),
    ("\\boxed{\\frac{3}{4}}", "0.75", "boxed"),
    ("\\boxed{\\frac{1}{3}}", "1/3", "boxed"),
    ("\\boxed{\\dfrac{1}{2}}", "0.5", "boxed"),
    ("\\boxed{x = 7}", "7", "boxed"),
    ("\\boxed{7 \\times 2 = 14}", "14", "boxed"),
    ("It costs $18.50 in total.", "18.5", "last-number"),
    ("Result: 60%", "60", "last-number"),
    ("So he needs 2.5 hours.", "2.5", "last-number"),
    # negative numbers (and hyphens that are not signs)
    ("\\boxed{-5}", "-5", "boxed"),
    ("\\boxed{\u22124}", "-4", "boxed"),
    ("The answer is -3 degrees.", "-3", "answer-phrase"),
    ("The temperature dropped to -12.", "-12", "last-number"),
    ("The range is 10-20", "20", "last-number"),
    ("Pages 10-20 were read, so 11 pages", "11", "last-number"),
    # "The answer is" / "final answer" phrases
    ("The final answer is 42.", "42", "answer-phrase"),
    ("The answer is: 42", "42", "answer-phrase"),
    ("**Final answer:** 15 apples", "15", "answer-phrase"),
    ("The answer is 42, which is 6 more than 36.", "42", "answer-phrase"),
    ("answer = 25", "25", "answer-phrase"),
    ("The answer is \\(5\\).", "5", "answer-phrase"),
    ("The answer is 5.\n\nNote: 7 is wrong", "5", "answer-phrase"),
    # several answers: the last wins
    ("The final answer is 7. Wait, recheck... The final answer is 8.", "8", "answer-phrase"),
    ("I think the answer is 10. Check: 5 + 5 = 10. Hmm, 12 is wrong.", "10", "answer-phrase"),
    ("3 boxes of 12: 3 x 12 = 36 eggs.\n#### 36", "36", "last-number"),
    ("She has 5 apples and buys 3 more, so 8.", "8", "last-number"),
    ("\\boxed{} The answer is 5", "5", "answer-phrase"),
    # reasoning blocks
    ("<think>I guess 99</think>The answer is \\boxed{12}.", "12", "boxed"),
    ("<think>scratch 1000</think>So we get 7 cookies.", "7", "last-number"),
    ("<think>Let me compute 5 * 3 = 15", None, "none"),
    # no answer
    ("No idea.", None, "none"),
    ("", None, "none"),
]


@pytest.mark.parametrize(("response", "expected", "rule"), GSM8K_CASES)
def test_gsm8k_extraction(response, expected, rule):
    assert extract_gsm8k(response) == (expected, rule)


def test_gsm8k_table_is_large_enough():
    assert len(GSM8K_CASES) >= 40


@pytest.mark.parametrize(
    ("extracted", "gold", "equal"),
    [
        ("18", "18", True),
        ("18.0", "18", True),
        ("18.5", "18", False),
        ("1000", "1000", True),
        ("-5", "-5", True),
        ("5", "-5", False),
        ("1/2", "0.5", True),
        ("3/4", "1", False),
        (None, "18", False),
        ("$18", "18", True),
    ],
)
def test_gsm8k_numeric_compare(extracted, gold, equal):
    assert gsm8k_equal(extracted, gold) is equal


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("Janet sells 9 eggs.\n#### 18", "18"),
        ("so 1,000 in all\n#### 1,000", "1000"),
        ("loses money\n#### -3", "-3"),
    ],
)
def test_gsm8k_gold(answer, gold):
    assert gsm8k_gold(answer) == gold


def test_gsm8k_gold_refuses_bad_answers():
    with pytest.raises(ValueError):
        gsm8k_gold("no hashes here")
    with pytest.raises(ValueError):
        gsm8k_gold("#### twelve")


def test_last_boxed_matches_braces():
    assert last_boxed("\\boxed{\\frac{1}{2}} and \\boxed{a{b}c}") == "a{b}c"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_boxed("nothing") is None


# (response, extracted letter)
MMLU_CASES = [
    ("Answer: B", "B"),
    ("The correct option is C.\nAnswer: C", "C"),
    ("Answer: $D$", "D"),
    ("**Answer: A**", "A"),
    ("Answer: (B)", "B"),
    ("Answer:C", "C"),
    ("ANSWER: D", "D"),
    ("answer: B", "B"),
    ("Answer : D", "D"),
    ("Answer:\tB", "B"),
    ("Answer: **C**", "C"),
    ("Answer: B)", "B"),
    ("Answer: A.", "A"),
    ("Final Answer: A", "A"),
    # several answers: the last wins
    ("Answer: B\nOn reflection...\nAnswer: D", "D"),
    ("Answer: Both A and B are wrong, so Answer: C", "C"),
    ("<think>Answer: A</think>\nAnswer: C", "C"),
    # no usable answer: wrong
    ("Answer: Based on the above, I cannot say.", None),
    ("The answer is B", None),
    ("Answer: E", None),
    ("answer: c", None),
    ("Answer: B2", None),
    ("<think>Answer: A, and still thinking", None),
    ("", None),
]


@pytest.mark.parametrize(("response", "expected"), MMLU_CASES)
def test_mmlu_extraction(response, expected):
    assert extract_mmlu(response) == expected


def test_mmlu_table_is_large_enough():
    assert len(MMLU_CASES) >= 20


def test_mmlu_regex_contains_the_readme_pattern():
    # The README's (?i)Answer[ \t]*:[ \t]*\$?([A-D])\$? plus the documented guards.
    found = MMLU_ANSWER.search("Answer: $B$")
    assert found is not None and found.group(1) == "B"


def test_strip_think():
    assert strip_think("a<think>x</think>b<THINK>y</THINK>c") == "abc"
    assert strip_think("a<think>never closed") == "a"


CODE_CASES = [
    ("```python\ndef f():\n    return 1\n```", "def f():\n    return 1\n"),
    ("Here:\n```py\nx=1\n```\n```python\ny=2\n```", "x=1\n"),
    ("```\nz=3\n```", "z=3\n"),
    ("```js\nvar a;\n```\n```python\nb=1\n```", "b=1\n"),
    ("```\nfirst\n```\n```python\nsecond\n```", "second\n"),
    ("def f(): pass", "def f(): pass"),
    ("```python\ndef f():\n    return 1", "def f():\n    return 1"),
    ("<think>```python\nbad\n```</think>```python\ngood\n```", "good\n"),
]


@pytest.mark.parametrize(("response", "code"), CODE_CASES)
def test_code_extraction(response, code):
    assert extract_code(response) == code


def test_humaneval_program_prepends_prompt_only_for_bodies():
    prompt = "def add(a, b):\n    '''Add.'''\n"
    test = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    full = "def add(a, b):\n    return a + b\n"
    body = "    return a + b\n"
    assert defines_function(full, "add") and not defines_function(body, "add")
    assert humaneval_program(prompt, full, test, "add") == full + "\n" + test + "\ncheck(add)\n"
    assert humaneval_program(prompt, body, test, "add") == (
        prompt + body + "\n" + test + "\ncheck(add)\n"
    )
