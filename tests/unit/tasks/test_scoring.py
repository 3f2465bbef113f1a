from __future__ import annotations

import math
import threading

from loongsage.agentflow.agents.base import AgentResult
from loongsage.tasks.math.reward import math_reward
from loongsage.tasks.registry import completion_reward
from loongsage.tasks.scoring import score_safely, score_within

ITEM = {"id": "1", "prompt": "2 + 2?", "label": "4"}


def _answered(text: str) -> AgentResult:
    return AgentResult(exit_status="submitted", answer=text)


def test_good_reward_passes_through_with_its_info():
    assert score_safely(completion_reward(math_reward), ITEM, _answered(r"\boxed{4}")) == (1.0, {}, None)
    assert score_safely(lambda item, result: (0.25, {"why": "x"}), ITEM, _answered("")) == (0.25, {"why": "x"}, None)
    assert score_safely(lambda item, result: (1, {}), ITEM, _answered("")) == (1.0, {}, None)


def test_completion_reward_scores_no_answer_as_the_empty_response():
    seen = []
    reward = completion_reward(lambda response, label: seen.append((response, label)) or 0.5)
    assert reward(ITEM, AgentResult(exit_status="max_turns")) == (0.5, {})
    assert seen == [("", "4")]


def test_raising_reward_scores_zero_with_error_text():
    def broken(item, result):
        raise KeyError("missing field")

    assert score_safely(broken, ITEM, _answered("x")) == (0.0, {}, "KeyError: 'missing field'")


def test_wrong_shapes_and_non_finite_scores_score_zero():
    for bad, words in [
        (1.0, "not a (score, info dict) pair"),
        (("1.0", {}), "of type str"),
        ((None, {}), "of type NoneType"),
        ((1.0, None), "not a (score, info dict) pair"),
    ]:
        score, info, error = score_safely(lambda item, result, bad=bad: bad, ITEM, _answered(""))
        assert score == 0.0 and info == {} and words in error
    for bad in (math.nan, math.inf, -math.inf):
        score, _, error = score_safely(lambda item, result, bad=bad: (bad, {}), ITEM, _answered(""))
        assert score == 0.0 and "non-finite" in error


def test_long_error_text_is_truncated():
    def loud(item, result):
        raise RuntimeError("x" * 10_000)

    _, _, error = score_safely(loud, ITEM, _answered(""))
    assert len(error) < 600 and error.endswith("...")


def test_score_within_gives_up_on_a_reward_that_hangs():
    release = threading.Event()
    hung = score_within(lambda item, result: release.wait(), ITEM, _answered(""), timeout_s=0.2)
    release.set()
    assert hung == (0.0, {}, "reward timed out: no score within data.reward_timeout_s=0.2 s", True)
    assert score_within(lambda item, result: (0.5, {}), ITEM, _answered(""), timeout_s=5) == (0.5, {}, None, False)
