from __future__ import annotations

import re

import pytest

from loongsage.tasks.math.synthetic import SyntheticArithmetic


def _question(item):
    return item["prompt"][-1]["content"]


def test_item_shape_and_label_is_the_value_of_the_expression():
    data = SyntheticArithmetic(size=50, seed=3)
    assert len(data) == 50
    for item in data:
        assert set(item) == {"id", "prompt", "label"}
        assert item["prompt"][0]["role"] == "user"
        content = _question(item)
        assert "\\boxed{" in content
        expression = re.fullmatch(r"What is (.*)\? Give the final answer as \\boxed\{number\}\.", content).group(1)
        terms = expression.split(" ")
        total = int(terms[0])
        for operator, operand in zip(terms[1::2], terms[2::2]):
            total += int(operand) if operator == "+" else -int(operand)
        assert item["label"] == str(total)
        assert total >= 0  # allow_negative defaults to False


def test_same_seed_same_items_other_seed_other_items():
    a, b = SyntheticArithmetic(size=30, seed=7), SyntheticArithmetic(size=30, seed=7)
    assert list(a) == list(b)
    assert [x["prompt"] for x in a] != [x["prompt"] for x in SyntheticArithmetic(size=30, seed=8)]


def test_train_and_eval_never_share_a_question_across_seeds():
    train = {_question(x) for x in SyntheticArithmetic("train", size=2000, seed=0)}
    evals = {_question(x) for x in SyntheticArithmetic("eval", size=300, seed=1)}
    assert evals and not train & evals


def test_ids_are_unique_and_indexing_matches_iteration():
    data = SyntheticArithmetic(size=40)
    assert len({x["id"] for x in data}) == 40
    assert data[5] == list(data)[5]
    assert data[-1] == list(data)[39]


def test_difficulty_knobs():
    data = SyntheticArithmetic(size=200, max_operand=5, min_terms=3, max_terms=4, operators="+")
    term_counts = {len(_question(x).split("+")) for x in data}
    assert term_counts == {3, 4}
    assert max(int(x["label"]) for x in data) <= 20  # at most 4 terms of at most 5


def test_products_take_precedence_over_sums():
    data = SyntheticArithmetic(size=200, min_terms=3, max_terms=3, operators="+-*", allow_negative=True)
    for item in data:
        a, op1, b, op2, c = _question(item).removeprefix("What is ").split("?")[0].split()
        value = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}
        if op2 == "*" and op1 != "*":
            expected = value[op1](int(a), int(b) * int(c))
        else:
            expected = value[op2](value[op1](int(a), int(b)), int(c))
        assert int(item["label"]) == expected, item
    assert SyntheticArithmetic(size=50, operators="*")[0]["label"].isdigit()


def test_negatives_when_allowed():
    data = SyntheticArithmetic(size=200, operators="-", allow_negative=True)
    assert any(int(x["label"]) < 0 for x in data)


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="split.*'test'"):
        SyntheticArithmetic(split="test")
    with pytest.raises(ValueError, match="min_terms"):
        SyntheticArithmetic(min_terms=1)
    with pytest.raises(ValueError, match="operators"):
        SyntheticArithmetic(operators="/")


def test_too_small_problem_space_fails_clearly():
    # only 0 - 0, 1 - 0 and 1 - 1 exist (0 - 1 is negative), and none hashes into a 1% eval split
    with pytest.raises(ValueError, match="too small"):
        SyntheticArithmetic("eval", size=5, max_operand=1, operators="-", eval_fraction=0.01)
