"""White-box agents carry no sampling defaults and no system prompt of their own: what they leave
unset the router samples with the run's block, what their options set is an override, and the
system prompt is the task's (data.system_prompt)."""

from __future__ import annotations

import json

import pytest

from loongsage.agentflow.agents import AgentTask, Endpoint, build_agent
from loongsage.agentflow.agents.tool_agent import DEFAULT_SYSTEM_PROMPT, ToolAgent
from loongsage.agentflow.router import SamplingDefaults

RUN = SamplingDefaults(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=7)
SYSTEM = "Answer in one word."
SUBMIT = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'


@pytest.fixture(scope="module")
def router_settings() -> dict:
    return {"sampling": RUN}


pytestmark = pytest.mark.usefixtures("fresh_script")


def _run(router, agent_name: str, options: dict, task: AgentTask):
    agent = build_agent(agent_name, options)
    return agent.run(task, Endpoint(router.url_for(task.instance_id), router.router.api_key, "tiny"))


def _sampling(engine) -> tuple:
    params = engine.requests[0]["sampling_params"]
    return params["temperature"], params["top_p"], params["top_k"], params["max_new_tokens"]


@pytest.mark.parametrize("agent_name, reply", [("tool", SUBMIT), ("chat", "Four.")])
def test_an_agent_without_sampling_options_samples_with_the_runs_block(router, engine, agent_name, reply):
    engine.say(reply)
    result = _run(router, agent_name, {}, AgentTask(f"{agent_name}-defaults", "2+2?"))
    assert result.exit_status == "submitted", result.error
    assert _sampling(engine) == (0.7, 0.9, 20, 7)


@pytest.mark.parametrize("agent_name, reply", [("tool", SUBMIT), ("chat", "Four.")])
def test_an_agents_sampling_options_override_the_runs_block(router, engine, agent_name, reply):
    engine.say(reply)
    options = {"temperature": 0.4, "top_p": 0.6, "top_k": 3, "max_tokens": 5}
    result = _run(router, agent_name, options, AgentTask(f"{agent_name}-overrides", "2+2?"))
    assert result.exit_status == "submitted", result.error
    assert _sampling(engine) == (0.4, 0.6, 3, 5)


@pytest.mark.parametrize("agent_name, reply", [("tool", SUBMIT), ("chat", "Four.")])
def test_the_tasks_system_prompt_opens_the_conversation(router, engine, tokenizer, agent_name, reply):
    engine.say(reply)
    _run(router, agent_name, {}, AgentTask(f"{agent_name}-system", "2+2?", system_prompt=SYSTEM))
    first_prompt = tokenizer.decode(engine.requests[0]["input_ids"])
    assert first_prompt.startswith("<|im_start|>system\n" + SYSTEM)
    assert DEFAULT_SYSTEM_PROMPT not in first_prompt


def test_without_a_system_prompt_the_tool_agent_uses_its_own_and_the_chat_agent_none(router, engine, tokenizer):
    engine.say(SUBMIT)
    _run(router, "tool", {}, AgentTask("tool-no-system", "Fix it."))
    assert tokenizer.decode(engine.requests[0]["input_ids"]).startswith("<|im_start|>system\n" + DEFAULT_SYSTEM_PROMPT)
    engine.reset()
    engine.say("Four.")
    _run(router, "chat", {}, AgentTask("chat-no-system", "2+2?"))
    template = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True, tokenize=False)
    assert engine.requests[0]["input_ids"] == tokenizer.encode(template, add_special_tokens=False)


def test_demonstrations_open_with_the_tasks_system_prompt():
    body = ToolAgent().demonstration(
        AgentTask("d", "Fix it.", system_prompt=SYSTEM), [{"name": "submit", "arguments": {}}], "tiny"
    )
    assert body["messages"][:2] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix it."}]
    assert json.loads(body["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {}


@pytest.mark.parametrize("agent_name", ["tool", "chat"])
def test_system_prompt_is_no_longer_an_agent_option(agent_name):
    with pytest.raises(ValueError, match="system_prompt"):
        build_agent(agent_name, {"system_prompt": SYSTEM})


def test_the_context_budget_keeps_room_for_a_known_max_tokens_else_for_one_token():
    # Without max_tokens the reply's length is the run's, which the agent is not told.
    assert not ToolAgent(context_budget=100)._out_of_budget(99)
    assert ToolAgent(context_budget=100)._out_of_budget(100)
    assert not ToolAgent(context_budget=100, max_tokens=10)._out_of_budget(90)
    assert ToolAgent(context_budget=100, max_tokens=10)._out_of_budget(91)
