"""Codex CLI, unmodified: on its own defaults with only the provider set, a plain task and a
tool round trip go through the router without a 4xx or 5xx (its namespace group of sub-agent
tools and its hosted web_search included); as the `codex` preset in the episode's sandbox,
driven by scripted model replies, it reads, edits and tests a repository through its own shell
tool, every call recorded; and a demonstration recorded through it equals a rollout of the same
calls, id for id."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from loongsage.agentflow.agents import AgentTask, Endpoint, build_agent
from loongsage.agentflow.agents.codex import CLOSING_REPLY, DEFAULT_PROMPT, MIN_MEMORY_MB, codex_calls
from loongsage.agentflow.router import to_samples
from loongsage.agentflow.sandbox import SandboxLimits, create_sandbox
from loongsage.tasks.swe.source import swe_synth
from tests.integration.agentflow.agents.buggy_repo import BACKENDS, PROMPT, REPO
from tests.integration.agentflow.router_support import get_trajectory, tool_call

pytestmark = pytest.mark.skipif(shutil.which("codex") is None, reason="Codex CLI is not installed (npm install -g @openai/codex)")

BACKEND = BACKENDS[0]
FIX = (
    "python3 - <<'EOF'\nfrom pathlib import Path\np = Path('calc.py')\np.write_text(p.read_text().replace('a - b', 'a + b'))\nEOF"
)


@pytest.mark.parametrize("served", [65536], indirect=True)  # its default instructions alone: ~17,000 characters
def test_on_its_defaults_with_only_the_provider_set_a_task_and_a_tool_round_trip_go_through(served, tmp_path):
    router, engine, tokenizer = served
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "tiny"\nmodel_provider = "loongsage"\n\n[model_providers.loongsage]\nname = "router"\n'
        f'base_url = "{router.url_for("defaults")}"\nenv_key = "ROUTER_KEY"\nwire_api = "responses"\n'
    )
    env = {"PATH": os.environ["PATH"], "CODEX_HOME": str(home), "ROUTER_KEY": router.router.key_for("defaults")}

    def codex(prompt: str) -> subprocess.CompletedProcess:
        command = ["codex", "exec", "--skip-git-repo-check", prompt]
        return subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL
        )

    engine.say("Hello!")
    plain = codex("Say hello.")
    assert plain.returncode == 0 and "Hello!" in plain.stdout, plain.stderr[-3000:]
    engine.say(tool_call("exec_command", cmd="echo hi"))
    engine.say("Done.")
    round_trip = codex("Run echo hi.")
    assert round_trip.returncode == 0 and "Done." in round_trip.stdout, round_trip.stderr[-3000:]
    assert len(engine.requests) == 3  # every request answered: a 4xx or 5xx would have ended it early
    prompts = [tokenizer.decode(r["input_ids"]) for r in engine.requests]
    assert '"name": "multi_agent_v1.spawn_agent"' in prompts[0]  # its namespace group's functions
    # The command's result reached the model (on its defaults Codex runs it in its own bwrap
    # sandbox, which cannot start from a CODEX_HOME under /tmp: that error is the result here).
    assert "<tool_response>" in prompts[2].split("Run echo hi.", 1)[1]
    assert get_trajectory(router, "defaults")["dropped_tools"] == {"web_search": 3}  # once per request: it sends it each time


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_preset_fixes_the_bug_through_the_router_inside_the_sandbox(served, backend):
    router, engine, tokenizer = served
    agent = build_agent("codex", {"timeout_s": 300})
    engine.say(tool_call("exec_command", cmd="cat calc.py"))
    engine.say(tool_call("exec_command", cmd=FIX))
    engine.say(tool_call("exec_command", cmd="python3 -m pytest -q tests"))
    engine.say("Fixed: add now returns a + b.")
    with create_sandbox(REPO, backend=backend, limits=SandboxLimits(memory_mb=2 * MIN_MEMORY_MB)) as sandbox:
        result = agent.run(AgentTask("cx-1", PROMPT, sandbox), Endpoint(router.url_for("cx-1"), router.router.api_key, "tiny"))
    assert result.exit_status == "exited", result.log
    assert "-    return a - b\n+    return a + b" in result.patch
    assert len(engine.requests) == 4, "one model call per step: no side call"
    prompts = [tokenizer.decode(r["input_ids"]) for r in engine.requests]
    assert DEFAULT_PROMPT in prompts[0] and PROMPT in prompts[0]
    offered = {
        n for n in ("exec_command", "write_stdin", "spawn_agent", "view_image", "request_user_input") if f'{n}"' in prompts[0]
    }
    assert offered == {"exec_command", "write_stdin"}
    assert "return a - b" in prompts[1] and "1 passed" in prompts[3]
    trajectory = router.router.store.pop("cx-1")
    assert len(trajectory.branches) == 1 and not trajectory.dropped_tools
    (sample,) = to_samples(trajectory)
    assert [i for i, m in zip(sample.response_ids, sample.loss_mask) if m == 1] == [t for ids in engine.outputs for t in ids]


def test_a_demonstration_through_codex_is_recorded_exactly_as_a_rollout_of_the_same_calls(served):
    """Id for id, but for what Codex itself varies from run to run in a command's output (its
    chunk id and the wall time), which the loss masks out anyway."""
    router, engine, tokenizer = served
    (item,) = swe_synth(count=1, seed=7)
    agent = build_agent("codex", {"timeout_s": 300})
    limits = SandboxLimits(memory_mb=2 * MIN_MEMORY_MB)
    with create_sandbox(item["task"].files, backend=BACKEND, limits=limits) as sandbox:
        body = agent.demonstration(AgentTask(item["id"], item["prompt"], sandbox), item["demonstration"], "tiny")
        demo_patch = sandbox.diff()
    for call in codex_calls(item["demonstration"]):
        engine.say(tool_call(call.name, **json.loads(call.arguments)))
    engine.say(CLOSING_REPLY)
    with create_sandbox(item["task"].files, backend=BACKEND, limits=limits) as sandbox:
        rolled = agent.run(
            AgentTask(item["id"], item["prompt"], sandbox), Endpoint(router.url_for("r"), router.router.api_key, "tiny")
        )
    (rollout,) = to_samples(router.router.store.pop("r"))
    (demo,) = to_samples(router.router.demonstrate("demo", body))
    assert rolled.exit_status == "exited" and rolled.patch == demo_patch and "+" in demo_patch
    assert [m["role"] for m in body["messages"]][-3:] == ["assistant", "tool", "assistant"]
    assert demo.prompt_ids == rollout.prompt_ids
    trained = [[i for i, m in zip(s.response_ids, s.loss_mask) if m == 1] for s in (demo, rollout)]
    assert trained[0] == trained[1] and trained[0]
    varying = re.compile(r"Chunk ID: \w+|Wall time: [\d.]+ seconds")
    assert varying.sub("", tokenizer.decode(demo.response_ids)) == varying.sub("", tokenizer.decode(rollout.response_ids))


def test_too_little_address_space_is_refused_naming_the_setting():
    agent = build_agent("codex", {})
    with create_sandbox(REPO, backend="local", limits=SandboxLimits(memory_mb=512)) as sandbox:
        with pytest.raises(ValueError, match=r"agent.sandbox_limits.memory_mb=512 .* set it to 1024"):
            agent.run(AgentTask("cx-2", PROMPT, sandbox), Endpoint("http://127.0.0.1:9/v1", "key", "tiny"))
