"""Whole agent episodes through the router: the white-box tool agent driven by scripted model
replies (a random tiny model never writes tool-call markup), and mini-swe-agent, unmodified,
on the real embedded engine with the tiny model."""

from __future__ import annotations

import json
import shutil

import pytest

from loongsage.agentflow.agents import AgentTask, Endpoint, build_agent
from loongsage.agentflow.router import to_samples
from loongsage.agentflow.sandbox import create_sandbox
from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.server import EmbeddedServer
from loongsage.models import load_tokenizer
from tests.integration.router_support import RecordingProxy, ScriptedEngine, start_router

REPO = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
PROMPT = "add(2, 3) returns -1 instead of 5. Fix calc.py."


def _tool_call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return load_tokenizer(tiny_model_path)


def test_tool_agent_fixes_the_bug_and_every_turn_is_recorded(tiny_model_path, tokenizer):
    engine = ScriptedEngine(tokenizer)
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
