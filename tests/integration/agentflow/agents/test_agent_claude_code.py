"""Claude Code, unmodified: on its own defaults with only the provider set, a plain task and a
tool round trip go through the router without a 4xx or 5xx; as the `claude_code` preset in the
episode's sandbox, driven by scripted model replies (no tiny model emits a tool call on demand),
it reads, edits and tests a repository through its own tools, every call recorded; and a
demonstration recorded through it equals a rollout of the same calls, id for id."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from loongsage.agentflow.agents import AgentTask, Endpoint, build_agent
from loongsage.agentflow.agents.claude_code import BARE_TOOLS, CLOSING_REPLY, MIN_MEMORY_MB, claude_code_calls
from loongsage.agentflow.router import to_samples
from loongsage.agentflow.sandbox import SandboxLimits, create_sandbox
from loongsage.tasks.swe.source import swe_synth
from tests.integration.agentflow.agents.buggy_repo import BACKENDS, PROMPT, REPO
from tests.integration.agentflow.router_support import tool_call

pytestmark = pytest.mark.skipif(
    shutil.which("claude") is None, reason="Claude Code is not installed (npm install -g @anthropic-ai/claude-code)"
)

BACKEND = BACKENDS[0]


@pytest.mark.parametrize("served", [65536], indirect=True)  # its default prompt: ~23,000 SmolLM2 tokens
def test_on_its_defaults_with_only_the_provider_set_a_task_and_a_tool_round_trip_go_through(served, tmp_path):
    """An unknown model name ("tiny") gets Claude Code's lean profile: adaptive thinking,
    context_management, output_config, metadata, max_tokens 32000 and a system message inside
    `messages`, all of which the router answers (docs/agent_fields.md). In print mode with no
    permissions granted the Write is refused by Claude Code itself: its tool_result still goes
    back to the model."""
    router, engine, tokenizer = served
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ANTHROPIC_BASE_URL": router.url_for("defaults"),
        "ANTHROPIC_AUTH_TOKEN": router.router.key_for("defaults"),
    }
    engine.say("Hello!")
    plain = subprocess.run(
        ["claude", "-p", "Say hello.", "--model", "tiny"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert plain.returncode == 0 and "Hello!" in plain.stdout, plain.stdout[-2000:]
    engine.say(tool_call("Write", file_path=str(tmp_path / "f.txt"), content="hi"))
    engine.say("Done.")
    round_trip = subprocess.run(
        ["claude", "-p", "Write hi to f.txt.", "--model", "tiny"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert round_trip.returncode == 0 and "Done." in round_trip.stdout, round_trip.stdout[-2000:]
    assert len(engine.requests) == 3  # every request answered: a 4xx or 5xx would have ended the episode early
    prompts = [tokenizer.decode(r["input_ids"]) for r in engine.requests]
    assert "<|im_start|>system\n" in prompts[0].split("Say hello.", 1)[1]  # its system message after the prompt
    assert '"name": "Write"' in prompts[1] and "<tool_response>" in prompts[2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_preset_fixes_the_bug_through_the_router_inside_the_sandbox(served, backend):
    router, engine, tokenizer = served
    agent = build_agent("claude_code", {"max_tokens": 128, "timeout_s": 300})
    with create_sandbox(REPO, backend=backend, limits=SandboxLimits(memory_mb=2 * MIN_MEMORY_MB)) as sandbox:
        calc = f"{sandbox.workdir}/calc.py"
        engine.say(tool_call("Read", file_path=calc))
        engine.say(tool_call("Edit", file_path=calc, old_string="a - b", new_string="a + b"))
        engine.say(tool_call("Bash", command="python3 -m pytest -q tests", description="Run the tests"))
        engine.say("Fixed: add now returns a + b.")
        result = agent.run(AgentTask("cc-1", PROMPT, sandbox), Endpoint(router.url_for("cc-1"), router.router.api_key, "tiny"))
    assert result.exit_status == "exited", result.log
    assert "-    return a - b\n+    return a + b" in result.patch
    assert len(engine.requests) == 4, "one model call per step: no side call"
    prompts = [tokenizer.decode(r["input_ids"]) for r in engine.requests]
    offered = {name for name in (*BARE_TOOLS, "Write", "Glob", "Agent") if f'"name": "{name}"' in prompts[0]}
    assert offered == set(BARE_TOOLS) and PROMPT in prompts[0]
    assert "cc_version" not in prompts[0]  # no build-specific attribution header in the prompt
    assert "return a - b" in prompts[1] and "1 passed" in prompts[3]
    assert all(r["sampling_params"]["max_new_tokens"] == 128 for r in engine.requests)
    branches = router.router.store.get("cc-1").branches
    assert len(branches) == 1, [(b.reason[:300], len(b.turns)) for b in branches]
    (branch,) = branches
    (sample,) = to_samples(router.router.store.pop("cc-1"))
    assert len(branch.turns) == 4
    assert [i for i, m in zip(sample.response_ids, sample.loss_mask) if m == 1] == [t for ids in engine.outputs for t in ids]


def test_a_demonstration_through_claude_code_is_recorded_exactly_as_a_rollout_of_the_same_calls(served):
    router, engine, _ = served
    (item,) = swe_synth(count=1, seed=7)
    agent = build_agent("claude_code", {"max_tokens": 128, "timeout_s": 300})
    limits = SandboxLimits(memory_mb=2 * MIN_MEMORY_MB)
    with create_sandbox(item["task"].files, backend=BACKEND, limits=limits) as sandbox:
        body = agent.demonstration(AgentTask(item["id"], item["prompt"], sandbox), item["demonstration"], "tiny")
        demo_patch = sandbox.diff()
    with create_sandbox(item["task"].files, backend=BACKEND, limits=limits) as sandbox:
        for call in claude_code_calls(item["demonstration"], sandbox.workdir):
            engine.say(tool_call(call.name, **json.loads(call.arguments)))
        engine.say(CLOSING_REPLY)
        rolled = agent.run(
            AgentTask(item["id"], item["prompt"], sandbox), Endpoint(router.url_for("r"), router.router.api_key, "tiny")
        )
    (rollout,) = to_samples(router.router.store.pop("r"))
    (demo,) = to_samples(router.router.demonstrate("demo", body))
    assert rolled.exit_status == "exited" and rolled.patch == demo_patch and "+" in demo_patch
    assert [m["role"] for m in body["messages"]][-5:] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert demo.prompt_ids == rollout.prompt_ids
    assert demo.response_ids == rollout.response_ids
    assert demo.loss_mask == rollout.loss_mask and 0 in demo.loss_mask


def test_settings_the_preset_cannot_honour_are_refused_by_name():
    with pytest.raises(ValueError, match=r"tools=\['Write'\] with bare=true"):
        build_agent("claude_code", {"tools": ["Write"]})
    with pytest.raises(ValueError, match=r"unknown tools \['Shell'\]"):
        build_agent("claude_code", {"bare": False, "tools": ["Bash", "Shell"]})
    agent = build_agent("claude_code", {})
    with create_sandbox(REPO, backend="local", limits=SandboxLimits(memory_mb=512)) as sandbox:
        with pytest.raises(ValueError, match=r"agent.sandbox_limits.memory_mb=512 .* set it to 1024"):
            agent.run(AgentTask("cc-2", PROMPT, sandbox), Endpoint("http://127.0.0.1:9/v1", "key", "tiny"))
