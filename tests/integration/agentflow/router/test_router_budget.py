"""A program that loops is bounded per trajectory (router.max_turns_per_trajectory,
max_tokens_per_trajectory): its replies are cut to the tokens it has left, and once either
bound is spent its requests get a 400 naming the bound, which the official client raises."""

from __future__ import annotations

import openai
import pytest

from tests.integration.agentflow.router_support import auth

pytestmark = pytest.mark.usefixtures("fresh_script")

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def router_settings() -> dict:
    return {"max_turns_per_trajectory": 3, "max_tokens_per_trajectory": 10}


def _client(router, trajectory: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url_for(trajectory), api_key=auth(router)["Authorization"].split()[1], max_retries=0)


def _ask(router, trajectory: str, max_tokens: int = 64):
    return _client(router, trajectory).chat.completions.create(model="tiny", messages=HI, max_tokens=max_tokens)


def test_a_trajectory_past_its_turns_is_refused_by_name(router, engine):
    for _ in range(3):
        engine.say(ids=[100])  # 2 tokens with the end of turn: the token bound is not what binds
        _ask(router, "looping")
    with pytest.raises(openai.BadRequestError) as refused:
        _ask(router, "looping")
    assert "trajectory looping has spent its budget (3 model turns of router.max_turns_per_trajectory=3)" in str(refused.value)
    assert len(engine.requests) == 3  # the refused request never reached the engine
    trajectory = router.router.store.pop("looping")
    assert (trajectory.turns_generated, trajectory.budget_refusals) == (3, 1)
    engine.say("fine")
    assert _ask(router, "another").choices[0].message.content == "fine"  # the bound is per trajectory


def test_a_trajectory_is_cut_to_the_tokens_it_has_left_then_refused(router, engine):
    engine.say(ids=[100] * 6)  # 7 tokens with the end of turn
    _ask(router, "flooding")
    engine.say(ids=[100, 101])
    _ask(router, "flooding")
    assert [r["sampling_params"]["max_new_tokens"] for r in engine.requests] == [10, 3]
    with pytest.raises(openai.BadRequestError) as refused:
        _ask(router, "flooding")
    assert "(10 generated tokens of router.max_tokens_per_trajectory=10)" in str(refused.value)
    assert router.router.store.pop("flooding").budget_refusals == 1
