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


@pytest.fixture(scope="module")
def thinking_router(engine_url, tiny_model_path):
    """The router with a Qwen3-style chat template: one with a thinking switch."""
    from loongsage.models import load_tokenizer
    from tests.unit.agentflow.router.test_chat_format import THINKING_TEMPLATE

    tokenizer = load_tokenizer(tiny_model_path)
    tokenizer.chat_template = THINKING_TEMPLATE
    server = start_router(engine_url, tiny_model_path, tokenizer)
    yield server
    server.stop()


def test_anthropic_thinking_sets_the_switch_and_comes_back_as_thinking_blocks(thinking_router, engine, tokenizer):
    client = claude(thinking_router, "thinks")
    messages = [{"role": "user", "content": "Capital of France?"}]
    engine.say("<think>\nIt is Paris.\n</think>\n\nParis.")
    first = client.messages.create(
        model="tiny", max_tokens=64, messages=messages, thinking={"type": "enabled", "budget_tokens": 1024}
    )
    assert [block.type for block in first.content] == ["thinking", "text"]
    assert (first.content[0].thinking, first.content[1].text) == ("It is Paris.", "Paris.")
    assert prompt_text(engine, tokenizer).endswith("<|im_start|>assistant\n")  # thinking on: no closed block

    # Sent back with its thinking block, the reply is restored as sampled: one branch, extended.
    messages += [{"role": "assistant", "content": [block.model_dump() for block in first.content]}]
    messages += [{"role": "user", "content": "And of Italy?"}]
    engine.say("Rome.")
    with client.messages.stream(model="tiny", max_tokens=64, messages=messages, thinking={"type": "disabled"}) as stream:
        second = stream.get_final_message()
    assert [block.type for block in second.content] == ["text"] and second.content[0].text == "Rome."
    assert "<think>\nIt is Paris.\n</think>\n\nParis." in prompt_text(engine, tokenizer, 1)
    assert prompt_text(engine, tokenizer, 1).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # off
    assert len(get_trajectory(thinking_router, "thinks")["branches"]) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_responses_reasoning_effort_sets_the_switch_and_comes_back_as_a_reasoning_item(
    thinking_router, engine, tokenizer, stream
):
    client = openai_client(thinking_router, f"reasons-{stream}")
    engine.say("<think>\nIt is Paris.\n</think>\n\nParis.")
    request = dict(model="tiny", input="Capital of France?", reasoning={"effort": "high"}, max_output_tokens=64)
    if stream:
        with client.responses.stream(**request) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**request)
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "It is Paris."
    assert response.output_text == "Paris."
    engine.say("ok")
    client.responses.create(model="tiny", input="hi", reasoning={"effort": "minimal"}, max_output_tokens=8)
    assert prompt_text(engine, tokenizer, 1).endswith("<think>\n\n</think>\n\n")  # minimal: off


NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [{"type": "function", "name": "lookup", "description": "Find a customer.", "parameters": {"type": "object"}}],
}


def test_a_namespace_group_gives_the_model_its_functions_and_the_calls_go_back_under_its_names(router, engine, tokenizer):
    """As Codex CLI sends its sub-agent tools: the model sees crm.lookup; the program gets a call
    to lookup in namespace crm, sends it back so, and the conversation stays one branch."""
    client = openai_client(router, "namespaced")
    engine.say('<tool_call>\n{"name": "crm.lookup", "arguments": {"who": "Ada"}}\n</tool_call>')
    first = client.responses.create(model="tiny", input="Find Ada.", tools=[NAMESPACE, FUNCTION], max_output_tokens=32)
    (call,) = first.output
    assert (call.type, call.name, call.model_dump()["namespace"]) == ("function_call", "lookup", "crm")
    assert '"name": "crm.lookup"' in prompt_text(engine, tokenizer) and "Customer records. Find a customer." in prompt_text(
        engine, tokenizer
    )
    engine.say("Ada is customer 7.")
    items = [
        {"role": "user", "content": "Find Ada."},
        call.model_dump(),
        {"type": "function_call_output", "call_id": call.call_id, "output": "id 7"},
    ]
    second = client.responses.create(model="tiny", input=items, tools=[NAMESPACE, FUNCTION], max_output_tokens=32)
    assert second.output_text == "Ada is customer 7."
    assert len(get_trajectory(router, "namespaced")["branches"]) == 1
