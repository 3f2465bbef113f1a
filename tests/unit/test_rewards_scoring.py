from __future__ import annotations

import math

from loongsage.tasks.math.reward import math_reward
from loongsage.tasks.scoring import score_safely


def test_good_reward_passes_through():
    assert score_safely(math_reward, r"\boxed{4}", "4") == (1.0, None)
    assert score_safely(lambda r, l: 0.25, "", "") == (0.25, None)
    assert score_safely(lambda r, l: 1, "", "") == (1.0, None)


def test_raising_reward_scores_zero_with_error_text():
    def broken(response, label):
        raise KeyError("missing field")

    score, error = score_safely(broken, "x", "y")
    assert score == 0.0
    assert error == "KeyError: 'missing field'"


def test_non_number_and_non_finite_results_score_zero():
    for bad, word in [("1.0", "str"), (None, "NoneType"), ([1.0], "list")]:
        score, error = score_safely(lambda r, l, bad=bad: bad, "", "")
        assert score == 0.0 and word in error and "not a number" in error
    for bad in (math.nan, math.inf, -math.inf):
        score, error = score_safely(lambda r, l, bad=bad: bad, "", "")
        assert score == 0.0 and "non-finite" in error


def test_long_error_text_is_truncated():
    def loud(response, label):
        raise RuntimeError("x" * 10_000)

    _, error = score_safely(loud, "", "")
    assert len(error) < 600 and error.endswith("...")
