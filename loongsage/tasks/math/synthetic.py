"""Seeded synthetic arithmetic: sums, differences (and, with operators "*", products) of small numbers.

Sized so that a 135M chat model solves some but not all items, which gives GRPO
groups with reward variance. Difficulty grows with `max_operand` and the number of terms.
Measured with SmolLM2-135M-Instruct, sampling at temperature 1, two terms, "+-":
about 25% solved with max_operand=9 (the default), about 6% with max_operand=20.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from loongsage.tasks.math.prompt import math_prompt

SPLITS = ("train", "eval")
# Consecutive rejected draws after which the requested split is judged (nearly) empty.
_MAX_REJECTIONS = 10_000


class SyntheticArithmetic(Sequence):
    """`size` items of one split, generated once at construction.

    Which split an expression belongs to is a fixed hash of its text, independent of the
    seed, so train and eval never share a question whatever seeds or sizes are used.
    Questions may repeat within a split when the problem space is small.
    """

    def __init__(
        self,
        split: str = "train",
        size: int = 10_000,
        seed: int = 0,
        max_operand: int = 9,
        min_terms: int = 2,
        max_terms: int = 2,
        operators: str = "+-",
        allow_negative: bool = False,
        eval_fraction: float = 0.2,
    ) -> None:
        _validate(split, size, max_operand, min_terms, max_terms, operators, eval_fraction)
        rng = random.Random(f"synthetic_arithmetic:{seed}:{split}")
        self._items = []
        for index in range(size):
            expression, answer = _draw_in_split(
                rng, split, eval_fraction, max_operand, min_terms, max_terms, operators, allow_negative
            )
            self._items.append(
                {
                    "id": f"arith-{split}-{seed}-{index}",
                    "prompt": math_prompt(f"What is {expression}?"),
                    "label": str(answer),
                }
            )

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):  # type: ignore[override]
        return self._items[index]


def _split_of(expression: str, eval_fraction: float) -> str:
    digest = hashlib.sha256(expression.encode()).digest()
    bucket = int.from_bytes(digest[:8], "big") / 2**64
    return "eval" if bucket < eval_fraction else "train"


def _draw_in_split(
    rng: random.Random,
    split: str,
    eval_fraction: float,
    max_operand: int,
    min_terms: int,
    max_terms: int,
    operators: str,
    allow_negative: bool,
) -> tuple[str, int]:
    for _ in range(_MAX_REJECTIONS):
        expression, answer = _draw(rng, max_operand, min_terms, max_terms, operators)
        if (allow_negative or answer >= 0) and _split_of(expression, eval_fraction) == split:
            return expression, answer
    raise ValueError(
        f"could not draw a {split!r} problem in {_MAX_REJECTIONS} tries: the problem space "
        f"(max_operand={max_operand}, terms {min_terms}..{max_terms}, operators {operators!r}, "
        f"eval_fraction={eval_fraction}) is too small; raise max_operand or the term count"
    )


def _draw(rng: random.Random, max_operand: int, min_terms: int, max_terms: int, operators: str) -> tuple[str, int]:
    num_terms = rng.randint(min_terms, max_terms)
    operands = [rng.randint(0, max_operand)]
    chosen = []
    for _ in range(num_terms - 1):
        chosen.append(rng.choice(operators))
        operands.append(rng.randint(0, max_operand))
    expression = " ".join([str(operands[0]), *(f"{op} {value}" for op, value in zip(chosen, operands[1:]))])
    return expression, _value(operands, chosen)


def _value(operands: list[int], operators: list[str]) -> int:
    """The expression's value with the usual precedence: products first, then left to right."""
    total, term, sign = 0, operands[0], 1
    for operator, operand in zip(operators, operands[1:]):
        if operator == "*":
            term *= operand
            continue
        total += sign * term
        term, sign = operand, (1 if operator == "+" else -1)
    return total + sign * term


def _validate(
    split: str,
    size: int,
    max_operand: int,
    min_terms: int,
    max_terms: int,
    operators: str,
    eval_fraction: float,
) -> None:
    problems: list[str] = []
    if split not in SPLITS:
        problems.append(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if size < 0:
        problems.append(f"size must be >= 0, got {size}")
    if max_operand < 1:
        problems.append(f"max_operand must be >= 1, got {max_operand}")
    if not 2 <= min_terms <= max_terms:
        problems.append(f"need 2 <= min_terms <= max_terms, got {min_terms} and {max_terms}")
    if not operators or set(operators) - {"+", "-", "*"}:
        problems.append(f"operators must be a non-empty combination of '+', '-' and '*', got {operators!r}")
    if not 0.0 < eval_fraction < 1.0:
        problems.append(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    if problems:
        raise ValueError("synthetic_arithmetic: " + "; ".join(problems))
