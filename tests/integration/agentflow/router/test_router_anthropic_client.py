"""The official `anthropic` client against the router (scripted stand-in engine): tool use
over two turns and streaming, with the base URL given with or without /v1 (the client appends
/v1/messages), and count_tokens equal to the prompt the next request sends."""

from __future__ import annotations

import anthropic
import pytest

from tests.integration.agentflow.router_support import auth, get_trajectory, http

WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


pytestmark = pytest.mark.usefixtures("fresh_script")


def claude(router, trajectory_id: str, with_v1: bool) -> anthropic.Anthropic:
    base = router.url_for(trajectory_id)  # ends in /v1, as OpenAI clients take it
    return anthropic.Anthropic(base_url=base if with_v1 else base[: -len("/v1")], api_key=router.router.api_key, max_retries=0)


@pytest.mark.parametrize("with_v1", [False, True])
def test_tool_use_over_two_turns_with_the_base_url_with_or_without_v1(router, engine, with_v1):
    client = claude(router, f"claude-{with_v1}", with_v1)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    counted = client.messages.count_tokens(model="tiny", system="Be brief.", messages=messages, tools=TOOLS)
    engine.say("I'll look.\n" + WEATHER_CALL)
    first = client.messages.create(model="tiny", system="Be brief.", max_tokens=80, messages=messages, tools=TOOLS)
    assert counted.input_tokens == len(engine.requests[0]["input_ids"]) == first.usage.input_tokens
    assert first.stop_reason == "tool_use"
    text, tool_use = first.content
    assert text.text == "I'll look." and (tool_use.name, tool_use.input) == ("get_weather", {"city": "Paris"})

    messages += [
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "sunny"}]},
    ]
    counted = client.messages.count_tokens(model="tiny", system="Be brief.", messages=messages, tools=TOOLS)
    engine.say("Sunny.")
    with client.messages.stream(model="tiny", system="Be brief.", max_tokens=80, messages=messages, tools=TOOLS) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "Sunny." and final.stop_reason == "end_turn"
    # the count was the prompt the turn sent, planned on the trajectory as it stood
    assert counted.input_tokens == len(engine.requests[1]["input_ids"])
    assert len(get_trajectory(router, f"claude-{with_v1}")["branches"]) == 1


def test_count_tokens_refusals_are_anthropic_errors_and_openapi_lists_the_public_routes(router, engine):
    client = claude(router, "claude-refused", with_v1=False)
    with pytest.raises(anthropic.BadRequestError, match="messages must not be empty"):
        client.messages.count_tokens(model="tiny", messages=[])
    schema = http().get(f"{router.base_url}/openapi.json").json()  # no key needed
    paths = set(schema["paths"])
    assert {"/v1/responses", "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/models"} <= paths
    assert not any(path.startswith("/trajectories") or "/v1/v1/" in path for path in paths)
    assert http().get(f"{router.base_url}/trajectories", headers=auth(router)).status_code == 200  # served, not listed
    assert engine.requests == []
