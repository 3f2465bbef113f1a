"""OpenCode, unmodified, as a black-box agent in the episode's sandbox: driven by scripted model
replies (no tiny model emits a tool call on demand), it reads, edits and tests a repository
through its own tools, every call goes through the router and is recorded, and its patch is
what a grader would see."""

from __future__ import annotations

import json
import shutil

import pytest

from loongsage.agentflow.agents import AgentTask, Endpoint, build_agent, opencode
from loongsage.agentflow.agents.opencode import CLOSING_REPLY, DEFAULT_PROMPT, MIN_MEMORY_MB, opencode_calls
from loongsage.agentflow.agents.replay import ReplayEndpoint, reply
from loongsage.agentflow.router import to_samples
from loongsage.agentflow.sandbox import SandboxLimits, available_backends, create_sandbox
from loongsage.models import load_tokenizer
from loongsage.tasks.swe.source import swe_synth
from tests.integration.agentflow.router_support import start_router, tool_call
from tests.standins.engine import StandinEngine

pytestmark = pytest.mark.skipif(shutil.which("opencode") is None, reason="OpenCode is not installed (npm install -g opencode-ai)")

REPO = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
PROMPT = "add(2, 3) returns -1 instead of 5. Fix calc.py."
# The recipe's headroom: at exactly the minimum OpenCode starts, but spawning its bash tool's
# commands can fail ("Out of memory"; seen once in a few runs here).
MEMORY_MB = 2 * MIN_MEMORY_MB


@pytest.mark.parametrize("backend", [b for b in ("bwrap", "local") if b in available_backends()][:1] or ["local"])
def test_opencode_fixes_the_bug_through_the_router_inside_the_sandbox(backend, tiny_model_path):
    tokenizer = load_tokenizer(tiny_model_path)
    engine = StandinEngine(tokenizer, max_context=8192)
    router = start_router(engine.url, tiny_model_path, tokenizer)
    try:
        engine.say(tool_call("read", filePath="/workspace/calc.py" if backend == "bwrap" else "calc.py"))
        engine.say(tool_call("edit", filePath="calc.py", oldString="a - b", newString="a + b"))
        engine.say(tool_call("bash", command="python3 -m pytest -q tests", description="Run the tests"))
        engine.say("Fixed: add now returns a + b.")
        agent = build_agent("opencode", {"max_tokens": 128, "timeout_s": 300})
        with create_sandbox(REPO, backend=backend, limits=SandboxLimits(memory_mb=MEMORY_MB)) as sandbox:
            result = agent.run(
                AgentTask("oc-1", PROMPT, sandbox), Endpoint(router.url_for("oc-1"), router.router.api_key, "tiny")
            )
        assert result.exit_status == "exited", result.log
        assert "-    return a - b\n+    return a + b" in result.patch
        assert len(engine.requests) == 4, "one model call per step: no title, compaction or other side call"

        prompts = [tokenizer.decode(r["input_ids"]) for r in engine.requests]
        assert DEFAULT_PROMPT in prompts[0] and PROMPT in prompts[0]
        offered = {
            name
            for name in ("bash", "read", "edit", "write", "glob", "grep", "task", "webfetch")
            if f'"name": "{name}"' in prompts[0]
        }
        assert offered == {"bash", "read", "edit", "write"}
        assert "return a - b" in prompts[1]  # the read tool's output reached the model
        assert "1 passed" in prompts[3]  # and the test run's
        assert all(r["sampling_params"]["max_new_tokens"] == 128 for r in engine.requests)

        (branch,) = router.router.store.get("oc-1").branches  # one linear conversation: ids extended turn by turn
        (sample,) = to_samples(router.router.store.pop("oc-1"))
        sampled = [i for i, m in zip(sample.response_ids, sample.loss_mask) if m == 1]
        assert sampled == [t for ids in engine.outputs for t in ids]
        assert len(branch.turns) == 4 and 0 in sample.loss_mask
    finally:
        router.stop()
        engine.stop()


def test_unknown_tools_are_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown tools \['shell'\]"):
        build_agent("opencode", {"tools": ["bash", "shell"]})


def test_too_little_address_space_is_refused_naming_the_setting():
    agent = build_agent("opencode", {})
    with create_sandbox(REPO, backend="local", limits=SandboxLimits(memory_mb=2048)) as sandbox:
        with pytest.raises(ValueError, match=r"agent.sandbox_limits.memory_mb=2048 .* set it to 4096"):
            agent.run(AgentTask("oc-2", PROMPT, sandbox), Endpoint("http://127.0.0.1:9/v1", "key", "tiny"))


def test_a_demonstration_through_opencode_is_recorded_exactly_as_a_rollout_of_the_same_calls(tiny_model_path):
    """The warm start's sample for a task's gold calls equals the sample of an episode in which
    the model itself made OpenCode's calls for them: same prompt ids, response ids, mask."""
    (item,) = swe_synth(count=1, seed=7)
    tokenizer = load_tokenizer(tiny_model_path)
    engine = StandinEngine(tokenizer, max_context=8192)
    router = start_router(engine.url, tiny_model_path, tokenizer, chat_format="hermes_compact")
    agent = build_agent("opencode", {"tools": ["read", "edit"], "max_tokens": 128, "timeout_s": 300})
    limits = SandboxLimits(memory_mb=MEMORY_MB)
    try:
        with create_sandbox(item["task"].files, limits=limits) as sandbox:
            body = agent.demonstration(AgentTask(item["id"], item["prompt"], sandbox), item["demonstration"], "tiny")
            demo_patch = sandbox.diff()
        for call in opencode_calls(item["demonstration"], sandbox.workdir):
            engine.say(tool_call(call.name, **json.loads(call.arguments)))
        engine.say(CLOSING_REPLY)
        with create_sandbox(item["task"].files, limits=limits) as sandbox:
            rolled = agent.run(
                AgentTask(item["id"], item["prompt"], sandbox), Endpoint(router.url_for("r"), router.router.api_key, "tiny")
            )
        (rollout,) = to_samples(router.router.store.pop("r"))
        (demo,) = to_samples(router.router.demonstrate("demo", body))
    finally:
        router.stop()
        engine.stop()
    assert rolled.exit_status == "exited" and rolled.patch == demo_patch and "+" in demo_patch
    assert [m["role"] for m in body["messages"]][-5:] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert demo.prompt_ids == rollout.prompt_ids
    assert demo.response_ids == rollout.response_ids
    assert demo.loss_mask == rollout.loss_mask and 0 in demo.loss_mask


def test_tool_descriptions_replace_opencodes_own_and_keep_its_parameters():
    """Through OpenCode's plugin hook: the request carries our descriptions, OpenCode's schemas,
    and `write` with `edit` (OpenCode grants both with one permission)."""
    short = {"read": "Read a file.", "edit": "Replace oldString with newString.", "write": "Write a file."}
    agent = build_agent("opencode", {"tools": ["read", "edit"], "tool_descriptions": short, "timeout_s": 120})
    with create_sandbox(REPO, backend="local", limits=SandboxLimits(memory_mb=MEMORY_MB)) as sandbox:
        with ReplayEndpoint([reply("Nothing to do.")], "tiny") as replay:
            result = agent.run(AgentTask("oc-3", PROMPT, sandbox), Endpoint(replay.base_url, "key", "tiny"))
    assert result.exit_status == "exited", result.log
    (request,) = replay.requests
    functions = {tool["name"]: tool for tool in request.tools}
    assert {name: f["description"] for name, f in functions.items()} == short
    assert {"filePath", "oldString", "newString"} <= set(functions["edit"]["parameters"]["properties"])


def test_tool_descriptions_for_tools_not_offered_are_refused_by_name():
    offered = r"tool_descriptions names \['bash'\], which are not offered \(offered: edit, read, write\)"
    with pytest.raises(ValueError, match=offered):
        build_agent("opencode", {"tools": ["read", "edit"], "tool_descriptions": {"bash": "Run a command."}})
    with pytest.raises(ValueError, match=r"tool_descriptions for \['read'\] must be non-empty text"):
        build_agent("opencode", {"tools": ["read"], "tool_descriptions": {"read": " "}})
    with pytest.raises(ValueError, match="write without edit"):
        build_agent("opencode", {"tools": ["read", "write"]})


def test_tool_descriptions_that_opencode_did_not_apply_fail_the_demonstration(monkeypatch):
    """A plugin OpenCode skips (here one without the hook) must not leave a warm start quietly
    training on OpenCode's own descriptions."""
    monkeypatch.setattr(opencode, "DESCRIPTIONS_PLUGIN", "export const Nothing = async () => ({});\n")
    (item,) = swe_synth(count=1, seed=7)
    agent = build_agent("opencode", {"tools": ["read", "edit"], "tool_descriptions": {"read": "Read a file."}})
    with create_sandbox(item["task"].files, limits=SandboxLimits(memory_mb=MEMORY_MB)) as sandbox:
        with pytest.raises(ValueError, match=r"did not apply tool_descriptions for \['read'\]"):
            agent.demonstration(AgentTask(item["id"], item["prompt"], sandbox), item["demonstration"], "tiny")
