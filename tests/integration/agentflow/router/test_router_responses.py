"""The OpenAI Responses API (`/v1/responses`) with the official `openai` client against the router
in front of a scripted engine (tests/standins/engine.py: no real model emits a chosen tool call on
demand): function tools over several turns, token in / token out as the chat path records it,
streaming as the client parses it, previous_response_id, and refusals that name their field."""

from __future__ import annotations

import json

import agents
import openai
import pytest

from tests.integration.agentflow.router_support import get_trajectory

WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}]


pytestmark = pytest.mark.usefixtures("fresh_script")


def client(router, trajectory_id: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url_for(trajectory_id), api_key=router.router.api_key, max_retries=0)


def test_function_tools_over_turns_record_the_same_tokens_as_chat_completions(router, engine):
    """The same conversation through responses.create and chat.completions.create: the engine is
    sent the same prompt ids each turn, and both trajectories carry the same ids and loss mask."""
    engine.say(WEATHER_CALL)
    responses = client(router, "by-responses")
    first = responses.responses.create(
        model="tiny", instructions="Be brief.", input="Weather in Paris?", tools=TOOLS, max_output_tokens=50
    )
    assert first.status == "completed" and first.id.startswith("resp_")
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert first.usage.input_tokens == len(engine.requests[0]["input_ids"])
    assert first.usage.output_tokens == len(engine.outputs[0])

    engine.say("It is sunny in Paris.")
    items = [
        {"role": "user", "content": "Weather in Paris?"},
        *[item.model_dump() for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 22C"},
    ]
    second = responses.responses.create(model="tiny", instructions="Be brief.", input=items, tools=TOOLS, max_output_tokens=50)
    assert second.output_text == "It is sunny in Paris."

    engine.say(WEATHER_CALL)
    chat = client(router, "by-chat").chat.completions
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
    reply = chat.create(model="tiny", messages=messages, tools=CHAT_TOOLS, max_tokens=50).choices[0].message
    engine.say("It is sunny in Paris.")
    tool_call = reply.tool_calls[0]
    messages += [reply, {"role": "tool", "tool_call_id": tool_call.id, "content": "sunny, 22C"}]
    chat.create(model="tiny", messages=messages, tools=CHAT_TOOLS, max_tokens=50)

    prompts = [r["input_ids"] for r in engine.requests]
    assert prompts[0] == prompts[2] and prompts[1] == prompts[3]
    (by_responses,) = get_trajectory(router, "by-responses")["branches"]
    (by_chat,) = get_trajectory(router, "by-chat")["branches"]
    assert by_responses["sample"] == by_chat["sample"]
    assert 0 in by_responses["sample"]["loss_mask"]  # the tool output is masked out


def test_previous_response_id_continues_the_conversation(router, engine, tokenizer):
    talk = client(router, "continued")
    engine.say(WEATHER_CALL)
    first = talk.responses.create(model="tiny", input="Weather in Paris?", tools=TOOLS)
    engine.say("Sunny.")
    call_id = first.output[0].call_id
    second = talk.responses.create(
        model="tiny",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call_id, "output": "sunny"}],
        tools=TOOLS,
    )
    assert second.previous_response_id == first.id and second.output_text == "Sunny."
    # the second prompt extends the first prompt and its output: one branch, token in / token out
    assert engine.requests[1]["input_ids"][: len(engine.requests[0]["input_ids"])] == engine.requests[0]["input_ids"]
    assert len(get_trajectory(router, "continued")["branches"]) == 1
    with pytest.raises(openai.BadRequestError, match="previous response 'resp_unknown' not found") as error:
        talk.responses.create(model="tiny", previous_response_id="resp_unknown", input="Hi")
    assert error.value.body["param"] == "previous_response_id"


def test_streamed_events_parse_into_the_clients_types(router, engine):
    engine.say("Let me check.\n" + WEATHER_CALL)
    stream = client(router, "streamed").responses.create(model="tiny", input="Paris?", tools=TOOLS, stream=True)
    events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert text == "Let me check." and json.loads(arguments) == {"city": "Paris"}
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [item.type for item in done] == ["message", "function_call"]
    assert events[-1].response.output_text == "Let me check."


def test_a_reply_cut_at_max_output_tokens_is_incomplete(router, engine, tokenizer):
    engine.queue(tokenizer.encode("one two three", add_special_tokens=False), {"type": "length", "length": 3})
    # seed and ignore_eos: the extensions chat completions take, so a bench or an RL harness can
    # make the two APIs sample the same tokens.
    response = client(router, "cut").responses.create(
        model="tiny", input="Count", max_output_tokens=3, extra_body={"seed": 9, "ignore_eos": True}
    )
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    sent = engine.requests[0]["sampling_params"]
    assert (sent["max_new_tokens"], sent["sampling_seed"], sent["ignore_eos"]) == (3, 9, True)


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"text": {"format": {"type": "json_schema"}}}, "text.format.type", "cannot constrain decoding"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type", "input item type 'item_reference'"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role", "unknown role 'robot'"),
        ({"background": True}, "background", "background responses are not supported"),
        ({"max_output_tokens": 0}, "max_output_tokens", "must be in [1,"),
        ({"top_logprobs": 21}, "top_logprobs", "must be in [0, 20]"),
    ],
)
def test_requests_the_router_cannot_honour_are_refused_by_field(router, engine, fields, param, message):
    body = {"model": "tiny", "input": "hi", **fields}
    with pytest.raises(openai.BadRequestError, match=message.replace("[", r"\[").replace("(", r"\(")) as error:
        client(router, "refused").responses.create(**body)
    assert error.value.body["param"] == param
    assert engine.requests == []  # nothing reached the engine


def test_the_openai_agents_sdk_runs_a_function_tool_on_its_default_model_path(router, engine):
    """openai-agents' default model is the Responses API: a run calls the tool, feeds its output
    back, and ends on the model's answer, all recorded on one trajectory."""
    agents.set_tracing_disabled(True)
    called = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        called.append(city)
        return "sunny, 22C"

    sdk_client = openai.AsyncOpenAI(base_url=router.url_for("sdk"), api_key=router.router.api_key, max_retries=0)
    model = agents.OpenAIResponsesModel(model="tiny", openai_client=sdk_client)
    agent = agents.Agent(name="weather", instructions="Be brief.", tools=[get_weather], model=model)
    engine.say(WEATHER_CALL)
    engine.say("It is sunny in Paris.")
    result = agents.Runner.run_sync(agent, "Weather in Paris?")
    assert called == ["Paris"] and result.final_output == "It is sunny in Paris."
    (branch,) = get_trajectory(router, "sdk")["branches"]
    assert len(branch["turns"]) == 2
    assert "sunny, 22C" in engine.tokenizer.decode(engine.requests[1]["input_ids"])
