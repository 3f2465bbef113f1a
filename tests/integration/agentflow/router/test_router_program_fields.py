"""Fields agent programs send that the router answers by a rule of its own (docs/agent_fields.md),
through the official `openai` and `anthropic` clients against the router in front of a scripted
engine: hosted tools dropped (and counted on the trajectory) or refused by field, and model
aliases for programs that pick a model by name for side calls."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.integration.agentflow.router_support import get_trajectory, start_router

ALIASES = ("claude-haiku-4-5", "gpt-5-mini")
FUNCTION = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
WEB_SEARCH = {"type": "web_search", "external_web_access": False}  # as Codex CLI sends it
CUSTOM = {"name": "get_weather", "description": "Current weather", "input_schema": FUNCTION["parameters"]}
SERVER_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}

pytestmark = pytest.mark.usefixtures("fresh_script")


@pytest.fixture(scope="module")
def router_settings() -> dict:
    return {"model_aliases": ALIASES}


def openai_client(router, trajectory_id: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url_for(trajectory_id), api_key=router.router.api_key, max_retries=0)


def claude(router, trajectory_id: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=router.url_for(trajectory_id), api_key=router.router.api_key, max_retries=0)


def prompt_text(engine, tokenizer, index: int = 0) -> str:
    return tokenizer.decode(engine.requests[index]["input_ids"])


def test_a_hosted_tool_is_left_out_of_the_prompt_and_counted(router, engine, tokenizer):
    engine.say("ok")
    client = openai_client(router, "hosted-responses")
    response = client.responses.create(model="tiny", input="hi", tools=[FUNCTION, WEB_SEARCH], max_output_tokens=8)
    assert response.output_text == "ok"
    assert "get_weather" in prompt_text(engine, tokenizer) and "web_search" not in prompt_text(engine, tokenizer)
    assert get_trajectory(router, "hosted-responses")["dropped_tools"] == {"web_search": 1}

    engine.say("ok")
    reply = claude(router, "hosted-messages").messages.create(
        model="tiny", max_tokens=8, messages=[{"role": "user", "content": "hi"}], tools=[CUSTOM, SERVER_SEARCH]
    )
    assert reply.content[0].text == "ok"
    assert "get_weather" in prompt_text(engine, tokenizer, 1) and "max_uses" not in prompt_text(engine, tokenizer, 1)
    assert get_trajectory(router, "hosted-messages")["dropped_tools"] == {"web_search_20250305": 1}


def test_with_hosted_tools_refused_the_400_names_the_tool(engine_url, tiny_model_path, tokenizer, engine):
    strict = start_router(engine_url, tiny_model_path, tokenizer, hosted_tools="refuse")
    try:
        with pytest.raises(openai.BadRequestError, match="hosted tool type 'web_search' cannot run here") as error:
            openai_client(strict, "strict").responses.create(model="tiny", input="hi", tools=[FUNCTION, WEB_SEARCH])
        assert error.value.body["param"] == "tools[1].type"
        with pytest.raises(anthropic.BadRequestError, match="'web_search_20250305' cannot run here"):
            claude(strict, "strict").messages.create(
                model="tiny", max_tokens=8, messages=[{"role": "user", "content": "hi"}], tools=[SERVER_SEARCH]
            )
    finally:
        strict.stop()
    assert engine.requests == []


@pytest.mark.parametrize("alias", ALIASES)
def test_an_alias_reaches_the_served_model_under_the_name_asked_for(router, engine, alias):
    engine.say("ok")
    reply = claude(router, f"alias-{alias}").messages.create(
        model=alias, max_tokens=8, messages=[{"role": "user", "content": "title?"}]
    )
    assert (reply.model, reply.content[0].text) == (alias, "ok")
    assert len(engine.requests) == 1
    with pytest.raises(anthropic.NotFoundError, match="model 'claude-opus-9' not found"):
        claude(router, "alias-unknown").messages.create(
            model="claude-opus-9", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )


def test_a_system_message_inside_messages_is_rendered_where_the_template_allows(router, engine, tokenizer):
    """Claude Code, with a model name outside its own list, puts reminders in `role: system`
    messages inside `messages`; SmolLM2's template renders a system turn anywhere."""
    engine.say("ok")
    messages = [
        {"role": "user", "content": "Fix the bug."},
        {"role": "system", "content": [{"type": "text", "text": "Reminder: run the tests."}]},
        {"role": "user", "content": "Go."},
    ]
    reply = claude(router, "late-system").messages.create(model="tiny", max_tokens=8, system="Be brief.", messages=messages)
    assert reply.content[0].text == "ok"
    assert "<|im_start|>system\nReminder: run the tests.<|im_end|>\n<|im_start|>user\nGo." in prompt_text(engine, tokenizer)
