"""Whole agent episodes through the router: the white-box tool agent driven by scripted model
replies (a random tiny model never writes tool-call markup), and mini-swe-agent, unmodified,
on the real embedded engine with the tiny model."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from loongsage.agentflow.agents import AgentTask, Endpoint, build_agent
from loongsage.agentflow.agents.miniswe import SUBMIT_SENTINEL, mini_calls
from loongsage.agentflow.router import to_samples
from loongsage.agentflow.sandbox import create_sandbox
from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.server import EmbeddedServer
from loongsage.tasks.swe.source import swe_synth
from tests.integration.agentflow.router_support import RecordingProxy, start_router
from tests.standins.engine import StandinEngine

REPO = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
PROMPT = "add(2, 3) returns -1 instead of 5. Fix calc.py."


def _tool_call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_tool_agent_fixes_the_bug_and_every_turn_is_recorded(tiny_model_path, tokenizer):
    engine = StandinEngine(tokenizer)
    router = start_router(engine.url, tiny_model_path, tokenizer)
    try:
        engine.say("Let me look.\n" + _tool_call("read_file", path="calc.py"))
        engine.say(_tool_call("str_replace", path="calc.py", old_str="a - b", new_str="a + b"))
        engine.say(_tool_call("bash", command="python3 -m pytest -q tests"))
        engine.say(_tool_call("submit"))
        agent = build_agent("tool", {"max_turns": 6, "max_tokens": 64})
        with create_sandbox(REPO) as sandbox:
            result = agent.run(
                AgentTask("calc-1", PROMPT, sandbox), Endpoint(router.url_for("calc-1"), router.router.api_key, "tiny")
            )
            assert sandbox.exec("python3 -m pytest -q tests").exit_code == 0
        assert result.exit_status == "submitted" and result.turns == 4
        assert "+    return a + b" in result.patch
        # The tool results reached the model: the third prompt holds the file's content, the
        # fourth the test run's output.
        third_prompt = tokenizer.decode(engine.requests[2]["input_ids"])
        assert "return a - b" in third_prompt and "<tool_response>" in third_prompt
        assert "1 passed" in tokenizer.decode(engine.requests[3]["input_ids"])

        (sample,) = to_samples(router.router.store.pop("calc-1"))
        sampled = [i for i, m in zip(sample.response_ids, sample.loss_mask) if m == 1]
        assert sampled == [t for ids in engine.outputs for t in ids]  # every sampled id, in order, masked in
        assert 0 in sample.loss_mask  # tool results are in the sequence but not trained on
        assert sample.prompt_ids == engine.requests[0]["input_ids"]
    finally:
        router.stop()
        engine.stop()


@pytest.mark.skipif(shutil.which("mini") is None, reason="mini-swe-agent is not installed")
def test_mini_swe_agent_runs_unmodified_through_the_router(tiny_model_path, tokenizer):
    engine = EmbeddedServer(Engine(tiny_model_path, {"max_running": 4, "max_context": 4096, "num_threads": 1}))
    engine.start()
    proxy = RecordingProxy(engine.base_url)
    router = start_router(proxy.url, tiny_model_path, tokenizer)
    try:
        agent = build_agent(
            "mini_swe_agent", {"step_limit": 2, "timeout_s": 300, "extra_config": ("model.model_kwargs.max_tokens=24",)}
        )
        with create_sandbox(REPO) as sandbox:
            result = agent.run(
                AgentTask("calc-mini", PROMPT, sandbox), Endpoint(router.url_for("calc-mini", 1), router.router.api_key, "tiny")
            )
        assert result.exit_status in ("exited", "error"), result
        trajectory = router.router.store.pop("calc-mini")
        assert trajectory is not None, f"mini-swe-agent never reached the router: {result.log}"
        turns = [turn for branch in trajectory.branches for turn in branch.turns]
        assert len(turns) >= 1
        for turn in turns:  # each recorded turn is exactly what the engine received and returned
            sent, answer = proxy.calls[turn.rids[0]]
            assert sent["input_ids"] == turn.prompt_ids and answer["output_ids"] == turn.output_ids
        samples = to_samples(trajectory)
        assert samples and all(len(s.loss_mask) == len(s.response_ids) for s in samples)
        sampled = [i for s in samples for i, m in zip(s.response_ids, s.loss_mask) if m == 1]
        assert sampled == [t for turn in turns for t in turn.output_ids]
        # mini-swe-agent's system prompt reached the model unchanged.
        assert "THOUGHT" in tokenizer.decode(turns[0].prompt_ids) or "bash" in tokenizer.decode(turns[0].prompt_ids)
    finally:
        router.stop()
        proxy.stop()
        engine.stop()


@pytest.mark.skipif(shutil.which("mini") is None, reason="mini-swe-agent is not installed")
def test_a_mini_swe_agent_demonstration_is_recorded_exactly_as_a_rollout_of_the_same_calls(tiny_model_path, tokenizer):
    """The warm start's sample for a task's gold calls (through mini-swe-agent, with a template
    of its own config that has Jinja braces) equals the sample of an episode in which the model
    made the same bash calls: same prompt ids, response ids, mask; the same patch."""
    (item,) = swe_synth(count=1, seed=7)
    template = "Fix this: {{task}}\nSubmit with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` alone."
    agent = build_agent(
        "mini_swe_agent", {"step_limit": 4, "timeout_s": 300, "extra_config": [f"agent.instance_template={template}"]}
    )
    engine = StandinEngine(tokenizer, max_context=8192)
    router = start_router(engine.url, tiny_model_path, tokenizer, chat_format="hermes_compact")
    try:
        with create_sandbox(item["task"].files) as sandbox:
            body = agent.demonstration(AgentTask(item["id"], item["prompt"], sandbox), item["demonstration"], "tiny")
            demo_patch = sandbox.diff()
        for call in mini_calls(item["demonstration"]):
            engine.say(_tool_call("bash", **json.loads(call.arguments)))
        with create_sandbox(item["task"].files) as sandbox:
            rolled = agent.run(
                AgentTask(item["id"], item["prompt"], sandbox), Endpoint(router.url_for("r"), router.router.api_key, "tiny")
            )
        (rollout,) = to_samples(router.router.store.pop("r"))
        (demo,) = to_samples(router.router.demonstrate("demo", body))
    finally:
        router.stop()
        engine.stop()
    assert rolled.exit_status == "exited" and rolled.patch == demo_patch and "+" in demo_patch
    assert body["messages"][1]["content"].startswith(f"Fix this: {item['prompt']}")
    assert SUBMIT_SENTINEL in body["messages"][-1]["tool_calls"][0]["function"]["arguments"]
    assert demo.prompt_ids == rollout.prompt_ids
    assert demo.response_ids == rollout.response_ids
    assert demo.loss_mask == rollout.loss_mask and 0 in demo.loss_mask


def test_mini_calls_replace_exactly_the_text_whatever_its_quotes(tmp_path):
    """The edit command, run by bash as mini-swe-agent would, replaces the text as written:
    quotes, backslashes, `$` and backticks are neither shell- nor regex-interpreted."""
    old, new = "x = 'a'\\n  # $HOME\n", 'x = "b" `id` $(true)\n'
    (tmp_path / "a.py").write_text(f"y = 1\n{old}{old}")
    calls = [{"name": "str_replace", "arguments": {"path": "a.py", "old_str": old, "new_str": new}}, {"name": "submit"}]
    edit, submit = (json.loads(call.arguments)["command"] for call in mini_calls(calls))
    subprocess.run(["bash", "-c", edit], cwd=tmp_path, check=True)
    assert (tmp_path / "a.py").read_text() == f"y = 1\n{new}{old}"  # the first occurrence only, as str_replace
    assert submit == f"echo {SUBMIT_SENTINEL}"
    with pytest.raises(ValueError, match="call 0 is 'bash'; only str_replace and submit translate"):
        mini_calls([{"name": "bash", "arguments": {"command": "ls"}}])
