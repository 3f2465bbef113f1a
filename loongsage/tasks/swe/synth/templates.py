"""Function templates for synthesized SWE tasks: small functions with the one-token mistakes
people make (a swapped operator, an off-by-one bound, min for max, the wrong end of a list).

Each template draws its names and constants from a random generator, so many distinct but
alike functions come from a few templates; each lists the mutations that may inject its bug
and the inputs its tests call it with.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    line: int  # index into Function.lines
    fixed: str  # the fragment of the correct line...
    buggy: str  # ...and what the bug turns it into


@dataclass(frozen=True)
class Function:
    name: str
    lines: tuple[str, ...]  # the correct source, `def` line first, four-space indents
    mutations: tuple[Mutation, ...]
    inputs: tuple[tuple, ...]  # argument tuples the tests call it with

    @property
    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


Template = Callable[[random.Random], Function]


def _pick(rng: random.Random, *choices: str) -> str:
    return rng.choice(choices)


def linear(rng: random.Random) -> Function:
    name = _pick(rng, "total_cost", "shipping_fee", "ticket_price", "room_rate", "rental_charge")
    count, base = _pick(rng, "count", "units", "nights", "items"), _pick(rng, "base", "fee", "deposit")
    rate = rng.randint(2, 9)
    return Function(
        name,
        (
            f"def {name}({count}, {base}):",
            f"    return {count} * {rate} + {base}",
        ),
        (Mutation(1, f"* {rate}", f"+ {rate}"), Mutation(1, f"+ {base}", f"- {base}"), Mutation(1, f"* {rate}", f"* {rate + 1}")),
        ((1, 0), (3, 5), (10, 2)),
    )


def threshold(rng: random.Random) -> Function:
    name = _pick(rng, "is_adult", "can_vote", "is_senior", "has_passed", "is_eligible")
    value = _pick(rng, "age", "score", "years", "points")
    limit = rng.randint(10, 70)
    return Function(
        name,
        (
            f"def {name}({value}):",
            f"    return {value} >= {limit}",
        ),
        (Mutation(1, ">=", ">"), Mutation(1, ">=", "<="), Mutation(1, f"{limit}", f"{limit + 1}")),
        ((limit,), (limit + 5,), (limit - 3,)),
    )


def clamp(rng: random.Random) -> Function:
    name = _pick(rng, "clamp", "limit", "bound_value", "fit_range")
    value, low, high = _pick(rng, "value", "x", "level"), _pick(rng, "low", "lo", "floor"), _pick(rng, "high", "hi", "ceiling")
    return Function(
        name,
        (
            f"def {name}({value}, {low}, {high}):",
            f"    return max({low}, min({value}, {high}))",
        ),
        (Mutation(1, f"max({low}", f"min({low}"), Mutation(1, f"min({value}", f"max({value}")),
        ((5, 0, 10), (15, 0, 10), (-3, 0, 10)),
    )


def running_total(rng: random.Random) -> Function:
    name = _pick(rng, "total", "sum_values", "add_all", "grand_total")
    items, item, acc = (
        _pick(rng, "values", "numbers", "amounts"),
        _pick(rng, "value", "n", "amount"),
        _pick(rng, "result", "acc", "running"),
    )
    return Function(
        name,
        (
            f"def {name}({items}):",
            f"    {acc} = 0",
            f"    for {item} in {items}:",
            f"        {acc} += {item}",
            f"    return {acc}",
        ),
        (Mutation(3, "+=", "-="), Mutation(1, "= 0", "= 1"), Mutation(3, f"+= {item}", f"= {item}")),
        (([1, 2, 3],), ([5],), ([4, 4, 10],)),
    )


def count_above(rng: random.Random) -> Function:
    name = _pick(rng, "count_above", "count_over", "how_many_exceed", "count_large")
    items, item, limit = _pick(rng, "values", "scores", "sizes"), _pick(rng, "v", "s", "x"), _pick(rng, "limit", "cutoff", "bar")
    return Function(
        name,
        (
            f"def {name}({items}, {limit}):",
            f"    return len([{item} for {item} in {items} if {item} > {limit}])",
        ),
        (Mutation(1, f"{item} > {limit}", f"{item} < {limit}"), Mutation(1, f"{item} > {limit}", f"{item} >= {limit}")),
        (([1, 5, 9], 4), ([3, 3, 8], 3), ([], 1)),
    )


def first_item(rng: random.Random) -> Function:
    position, index, bad = rng.choice((("first", "0", "-1"), ("last", "-1", "0"), ("second", "1", "2"), ("head", "0", "1")))
    name = f"{position}_{_pick(rng, 'item', 'entry', 'element')}"
    items = _pick(rng, "items", "queue", "names", "values")
    return Function(
        name,
        (
            f"def {name}({items}):",
            f"    return {items}[{index}]",
        ),
        (Mutation(1, f"[{index}]", f"[{bad}]"),),
        ((["a", "b", "c"],), ([7, 8, 9, 10],)),
    )


def average(rng: random.Random) -> Function:
    name = _pick(rng, "average", "mean_score", "mean_value", "avg")
    items = _pick(rng, "values", "scores", "marks")
    return Function(
        name,
        (
            f"def {name}({items}):",
            f"    return sum({items}) / len({items})",
        ),
        (Mutation(1, f"/ len({items})", f"// len({items})"), Mutation(1, f"/ len({items})", f"/ (len({items}) + 1)")),
        (([1, 2],), ([3, 4, 8],), ([10],)),
    )


def text_case(rng: random.Random) -> Function:
    name, method, bad = rng.choice(
        (
            ("shout", "upper", "lower"),
            ("whisper", "lower", "upper"),
            ("title_case", "title", "upper"),
            ("tidy", "strip", "lstrip"),
        )
    )
    text = _pick(rng, "text", "message", "name", "word")
    return Function(
        name,
        (
            f"def {name}({text}):",
            f"    return {text}.{method}()",
        ),
        (Mutation(1, f".{method}()", f".{bad}()"),),
        (("hello World ",), (" big Cat",)),
    )


def both(rng: random.Random) -> Function:
    name = _pick(rng, "can_enter", "is_ready", "may_ship", "should_alert")
    first, second = rng.sample(("paid", "open", "signed", "checked", "valid", "active"), 2)
    return Function(
        name,
        (
            f"def {name}({first}, {second}):",
            f"    return {first} and {second}",
        ),
        (Mutation(1, " and ", " or "),),
        ((True, True), (True, False), (False, True), (False, False)),
    )


def sum_to(rng: random.Random) -> Function:
    name = _pick(rng, "sum_to", "triangle", "sum_up_to", "total_below_or_at")
    n = _pick(rng, "n", "limit", "top")
    return Function(
        name,
        (
            f"def {name}({n}):",
            f"    return sum(range({n} + 1))",
        ),
        (Mutation(1, f"range({n} + 1)", f"range({n})"), Mutation(1, f"range({n} + 1)", f"range(1, {n})")),
        ((4,), (1,), (10,)),
    )


def percent(rng: random.Random) -> Function:
    name = _pick(rng, "percent", "share_of", "ratio_percent", "completion")
    part, whole = _pick(rng, "part", "done", "used"), _pick(rng, "whole", "total", "capacity")
    return Function(
        name,
        (
            f"def {name}({part}, {whole}):",
            f"    return {part} * 100 / {whole}",
        ),
        (Mutation(1, "* 100", "* 10"), Mutation(1, f"{part} * 100 / {whole}", f"{whole} * 100 / {part}")),
        ((1, 4), (3, 5), (10, 10)),
    )


def larger(rng: random.Random) -> Function:
    name = _pick(rng, "larger", "bigger", "pick_max", "winner")
    a, b = rng.choice((("a", "b"), ("x", "y"), ("left", "right"), ("first", "second")))
    return Function(
        name,
        (
            f"def {name}({a}, {b}):",
            f"    if {a} > {b}:",
            f"        return {a}",
            f"    return {b}",
        ),
        (Mutation(1, f"{a} > {b}", f"{a} < {b}"), Mutation(2, f"return {a}", f"return {b}")),
        ((3, 9), (9, 3), (4, 4)),
    )


def is_even(rng: random.Random) -> Function:
    name, remainder, bad = rng.choice((("is_even", "0", "1"), ("is_odd", "1", "0")))
    n = _pick(rng, "n", "number", "count")
    return Function(
        name,
        (
            f"def {name}({n}):",
            f"    return {n} % 2 == {remainder}",
        ),
        (Mutation(1, f"== {remainder}", f"== {bad}"), Mutation(1, "% 2", "% 3")),
        ((4,), (7,), (0,)),
    )


def discount(rng: random.Random) -> Function:
    name = _pick(rng, "discounted", "sale_price", "after_discount", "reduced_price")
    price, rate = _pick(rng, "price", "amount", "cost"), _pick(rng, "rate", "off", "discount")
    return Function(
        name,
        (
            f"def {name}({price}, {rate}):",
            f"    return {price} - {price} * {rate}",
        ),
        (Mutation(1, f"{price} - {price}", f"{price} + {price}"), Mutation(1, f"* {rate}", f"/ {rate}")),
        ((100, 0.25), (80, 0.5), (10, 0.1)),
    )


def word_count(rng: random.Random) -> Function:
    name = _pick(rng, "word_count", "count_words", "num_words")
    text = _pick(rng, "text", "sentence", "line")
    return Function(
        name,
        (
            f"def {name}({text}):",
            f"    return len({text}.split())",
        ),
        (Mutation(1, ".split()", ".split(' ')"), Mutation(1, f"len({text}.split())", f"len({text})")),
        (("a b c",), ("one  two",), (" hi ",)),
    )


def in_range(rng: random.Random) -> Function:
    name = _pick(rng, "in_range", "is_between", "within")
    value, low, high = _pick(rng, "value", "x", "t"), _pick(rng, "low", "start"), _pick(rng, "high", "end")
    return Function(
        name,
        (
            f"def {name}({value}, {low}, {high}):",
            f"    return {low} <= {value} <= {high}",
        ),
        (Mutation(1, f"{low} <= {value}", f"{low} < {value}"), Mutation(1, f"{value} <= {high}", f"{value} < {high}")),
        ((1, 1, 5), (5, 1, 5), (3, 1, 5), (9, 1, 5)),
    )


TEMPLATES: tuple[Template, ...] = (
    linear,
    threshold,
    clamp,
    running_total,
    count_above,
    first_item,
    average,
    text_case,
    both,
    sum_to,
    percent,
    larger,
    is_even,
    discount,
    word_count,
    in_range,
)
