"""Answer extraction and the 0/1 math reward.

Both take arbitrary model output, so they never raise on any string: unbalanced braces,
empty boxes, huge inputs and odd unicode all end as "no answer" rather than an error.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# A number as it appears in prose: 1,234.5 | -12 | .5 | 3/4
_NUMBER_IN_TEXT = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|-?\.\d+", re.ASCII)
_PLAIN_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)", re.ASCII)
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d*)?", re.ASCII)
_BRACE = re.compile(r"[{}]")
_NON_SPACE = re.compile(r"\S")
_LATEX_FRACTION = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_VARIABLE_PREFIX = re.compile(r"^[A-Za-z]\w*\s*=")
_UNITS_ONLY = re.compile(r"[A-Za-z\s]*")
# Longer numbers are not a plausible answer and would only cost time to convert.
_MAX_DIGITS = 64
_UNICODE_MINUS = str.maketrans({"\u2212": "-", "\uff0d": "-"})


def extract_answer(text: str) -> str | None:
    """The model's final answer: the content of the last complete, non-empty
    `\\boxed{...}` (nested braces allowed), else the last number in the text.

    Numbers come back canonical ("1,234.0" -> "1234", "0.5" and "\\frac{1}{2}" -> "1/2");
    a boxed answer that is not a number comes back as its text without spaces.
    """
    boxed = _last_boxed(text)
    if boxed is not None:
        return _canonical(boxed)
    numbers = _NUMBER_IN_TEXT.findall(text.translate(_UNICODE_MINUS))
    return _canonical(numbers[-1]) if numbers else None


def math_reward(response: str, label: str) -> float:
    """1.0 when the extracted answer equals the label (numerically when both are
    numbers), else 0.0."""
    answer = extract_answer(response)
    return 1.0 if answer is not None and answer == _canonical(label) else 0.0


def _last_boxed(text: str) -> str | None:
    # One left-to-right pass with a brace stack, slicing only the winner, so the cost
    # stays linear even for thousands of unclosed or deeply nested "\boxed{".
    stack: list[int | None] = []  # content start for a \boxed{ brace, None for a plain one
    last: tuple[int, int] | None = None
    boxed_starts = {m.end() - 1: m.end() for m in _BOXED.finditer(text)}
    for brace in _BRACE.finditer(text):
        position = brace.start()
        if brace.group() == "{":
            stack.append(boxed_starts.get(position))
        elif stack:
            start = stack.pop()
            if start is not None and _NON_SPACE.search(text, start, position):
                last = (start, position)
    return text[last[0] : last[1]] if last else None


def _canonical(answer: str) -> str:
    cleaned = _strip_decoration(answer)
    number = _as_fraction(cleaned)
    if number is None:
        number = _number_with_units(cleaned)
    if number is None:
        return "".join(cleaned.split())
    return str(number.numerator) if number.denominator == 1 else f"{number.numerator}/{number.denominator}"


def _number_with_units(text: str) -> Fraction | None:
    """The number in "x = 12" or "12 apples"; None for "x+1", where the number is part
    of an expression."""
    text = _VARIABLE_PREFIX.sub("", text)
    numbers = _NUMBER_IN_TEXT.findall(text)
    if len(numbers) != 1 or not _UNITS_ONLY.fullmatch(text.replace(numbers[0], "", 1)):
        return None
    return _as_fraction(numbers[0])


def _strip_decoration(answer: str) -> str:
    text = answer.translate(_UNICODE_MINUS)
    text = _TEXT_WRAPPER.sub(r"\1", text)
    text = _LATEX_FRACTION.sub(r"(\1)/(\2)", text)
    text = _BOXED.sub("{", text)  # a box inside the box: \boxed{\boxed{3}}
    for decoration in ("\\$", "$", "\\%", "%", "\\!", "\\,", "{,}", "\\left", "\\right", "{", "}"):
        text = text.replace(decoration, "")
    return text.strip().rstrip(".").strip()


def _as_fraction(text: str) -> Fraction | None:
    """An exact number for "12", "-1,234.50", "3/4", "(1)/(2)"; None for anything else."""
    parts = text.replace(" ", "").split("/")
    if len(parts) > 2:
        return None
    values = [_as_decimal(part.removeprefix("(").removesuffix(")")) for part in parts]
    if any(value is None for value in values):
        return None
    if len(values) == 1:
        return values[0]
    numerator, denominator = values
    return None if denominator == 0 else numerator / denominator


def _as_decimal(text: str) -> Fraction | None:
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    if len(text) > _MAX_DIGITS or not _PLAIN_NUMBER.fullmatch(text):
        return None
    return Fraction(text)
