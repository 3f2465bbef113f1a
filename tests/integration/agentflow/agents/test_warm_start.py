"""Warm-start demonstrations: the tool agent replays a task's gold tool calls in a real sandbox,
and the router records them token for token as it records a rollout of the same calls."""

from __future__ import annotations

import json

import pytest

from loongsage.agentflow.agents import AgentTask, Endpoint, build_agent
from loongsage.agentflow.router import to_samples
from loongsage.agentflow.sandbox import create_sandbox
from loongsage.tasks.swe.source import swe_synth
from tests.integration.agentflow.router_support import start_router
from tests.standins.engine import StandinEngine

OPTIONS = {"tools": ["str_replace"], "max_turns": 3, "max_tokens": 96}
SYSTEM = "Fix the bug."  # data.system_prompt, handed to the agent with each task


def _markup(call: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": call["name"], "arguments": call["arguments"]}) + "\n</tool_call>"


@pytest.mark.parametrize("chat_format", ["hermes", "hermes_compact"])
def test_demonstration_is_recorded_exactly_as_a_rollout_of_the_same_calls(tiny_model_path, tokenizer, chat_format):
    (item,) = swe_synth(count=1, seed=7)
    calls = item["demonstration"]
    assert [c["name"] for c in calls] == ["str_replace", "submit"]
    engine = StandinEngine(tokenizer)
    router = start_router(engine.url, tiny_model_path, tokenizer, chat_format=chat_format)
    agent = build_agent("tool", OPTIONS)
    try:
        for call in calls:
            engine.say(_markup(call))
        with create_sandbox(item["task"].files) as sandbox:
            rolled = agent.run(
                AgentTask(item["id"], item["prompt"], sandbox, system_prompt=SYSTEM),
                Endpoint(router.url_for("rollout"), router.router.api_key, "tiny"),
            )
        with create_sandbox(item["task"].files) as sandbox:
            body = agent.demonstration(AgentTask(item["id"], item["prompt"], sandbox, system_prompt=SYSTEM), calls, "tiny")
            replayed_patch = sandbox.diff()
        (rollout,) = to_samples(router.router.store.pop("rollout"))
        (demo,) = to_samples(router.router.demonstrate("demo", body))
    finally:
        router.stop()
        engine.stop()
    assert rolled.exit_status == "submitted" and rolled.patch == replayed_patch
    assert replayed_patch and "+" in replayed_patch
    assert demo.prompt_ids == rollout.prompt_ids
    assert demo.response_ids == rollout.response_ids
    assert demo.loss_mask == rollout.loss_mask and 0 in demo.loss_mask
    assert router.router.store.get("demo") is None  # demonstrations are not rollouts to collect
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    # No top_k option: the run's (RouterConfig.sampling, here its default -1 = off) is sampled with.
    assert all(request["sampling_params"]["top_k"] == -1 for request in engine.requests)


def test_tool_agent_top_k_reaches_the_engine(tiny_model_path, tokenizer):
    engine = StandinEngine(tokenizer)
    router = start_router(engine.url, tiny_model_path, tokenizer)
    try:
        engine.say(_markup({"name": "submit", "arguments": {}}))
        result = build_agent("tool", {**OPTIONS, "top_k": 50}).run(
            AgentTask("t", "Fix it."), Endpoint(router.url_for("t"), router.router.api_key, "tiny")
        )
    finally:
        router.stop()
        engine.stop()
    assert result.exit_status == "submitted"
    assert engine.requests[0]["sampling_params"]["top_k"] == 50


def test_compact_format_describes_each_tool_in_one_line(tiny_model_path, tokenizer):
    from loongsage.agentflow.router.chat_format import get_chat_format
    from loongsage.agentflow.router.messages import Message

    agent = build_agent("tool", OPTIONS)
    tools = [schema["function"] for schema in agent.tool_schemas]
    compact = get_chat_format("hermes_compact", tokenizer).render([Message("user", "hi")], tools)
    full = get_chat_format("hermes", tokenizer).render([Message("user", "hi")], tools)
    assert "- str_replace(path, old_str, new_str): Replace the one occurrence" in compact
    assert "- submit(answer): Finish the task" in compact
    assert len(tokenizer.encode(compact)) * 2 < len(tokenizer.encode(full))


def test_tool_agent_refuses_unknown_tools_by_name():
    with pytest.raises(ValueError, match=r"tools: unknown \['grep'\]"):
        build_agent("tool", {"tools": ["grep", "bash"]})
