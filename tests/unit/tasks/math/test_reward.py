from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loongsage.tasks.math.reward import extract_answer, math_reward


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so the answer is \boxed{12}", "12"),
        (r"\boxed{3} first, then \boxed{5}", "5"),  # the last box wins
        (r"\boxed{\frac{1}{2}}", "1/2"),
        (r"\boxed{\dfrac{3}{6}}", "1/2"),
        (r"\boxed{{12}}", "12"),  # nested braces
        (r"\boxed{\boxed{3}}", "3"),
        (r"\boxed{\text{12 apples}}", "12"),
        (r"\boxed{x = 7}", "7"),
        (r"\boxed{\$1,000}", "1000"),
        (r"\boxed{50\%}", "50"),
        (r"\boxed{1{,}234}", "1234"),
        (r"\boxed{12.0}", "12"),
        (r"\boxed{-3/4}", "-3/4"),
        (r"\boxed{x+1}", "x+1"),  # not a number: kept as text
        (r"\fbox{9}", "9"),
        ("The total is 1,234 dollars.", "1234"),  # no box: last number
        ("7 + 5 = 12.", "12"),
        ("It is \u22125", "-5"),  # unicode minus
        ("half: 0.5", "1/2"),
        (r"I think 9 \boxed{}", "9"),  # empty box ignored
        (r"\boxed{12", "12"),  # unclosed box: falls back to the last number
        (r"}}{{ \boxed{7}}", "7"),
        ("no digits here", None),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "response, label, reward",
    [
        (r"\boxed{12}", "12", 1.0),
        (r"\boxed{12.0}", "12", 1.0),
        (r"\boxed{1234}", "1,234", 1.0),
        ("the answer is 2.50", "2.5", 1.0),
        (r"\boxed{\frac{5}{2}}", "2.5", 1.0),
        (r"\boxed{-6}", "-6", 1.0),
        (r"\boxed{6}", "-6", 0.0),
        (r"\boxed{13}", "12", 0.0),
        (r"12 then \boxed{13}", "12", 0.0),  # the boxed answer beats a stray number
        ("", "12", 0.0),
        (r"\boxed{}", "12", 0.0),
        (r"\boxed{x+1}", "x + 1", 1.0),  # non-numeric labels compare without spaces
        (r"\boxed{1/0}", "1/0", 1.0),
        ("12", "", 0.0),
    ],
)
def test_math_reward(response, label, reward):
    assert math_reward(response, label) == reward


MALFORMED = [
    "{" * 10_000,
    "}" * 10_000,
    "\\boxed{" * 20_000,
    "\\boxed{" * 5_000 + "}" * 5_000,
    "\\boxed{\\frac{1}{0}}",
    "\\boxed{\\frac{",
    "\\boxed{ }",
    "\\boxed",
    "\\",
    "9" * 100_000,
    "1," * 50_000,
    "-" * 1000 + "5",
    "..." * 1000,
    "1/0",
    "0/0 = \\boxed{0/0}",
    "\x00\x01\ud7ff\ufffd",
    "٣ + ٤ = ٧",  # Arabic-Indic digits
    "１２",  # full-width digits
    "🙂 \\boxed{🙂}",
    "\\boxed{" + "9" * 5000 + "}",
    "\\boxed{1e400}",
    "\\boxed{nan}",
    "\\boxed{inf}",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_input_never_raises(text):
    assert math_reward(text, "12") in (0.0, 1.0)
    assert math_reward("12", text) in (0.0, 1.0)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("\\boxedfrac{}0123456789.,-/ $%xt")) | st.characters(), max_size=200),
    st.text(max_size=20),
)
def test_fuzz_never_raises(response, label):
    assert math_reward(response, label) in (0.0, 1.0)
    answer = extract_answer(response)
    assert answer is None or isinstance(answer, str)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(10**9), max_value=10**9))
def test_boxed_integer_always_matches_its_label(n):
    assert math_reward(f"The answer is \\boxed{{{n:,}}}.", str(n)) == 1.0
    assert math_reward(f"The answer is \\boxed{{{n + 1}}}.", str(n)) == 0.0
