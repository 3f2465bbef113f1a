"""A black-box agent run inside the episode's sandbox (`in_sandbox`): in a sandbox without
network it reaches the router through the bridge and nothing else on the host; its calls are
recorded on its trajectory; its file edits are the episode's patch, the bridge's socket is not."""

from __future__ import annotations

import socket

import pytest

from loongsage.agentflow.agents import AgentTask, Endpoint, build_agent
from loongsage.agentflow.agents.router_bridge import SANDBOX_PORT, SOCKET_DIR
from loongsage.agentflow.sandbox import available_backends, create_sandbox
from loongsage.models import load_tokenizer
from tests.integration.agentflow.router_support import start_router
from tests.standins.engine import StandinEngine

# The agent: stdlib only (the sandbox sees the framework's Python, not necessarily its package).
AGENT = """
import json, os, socket, sys, urllib.request
body = {"model": os.environ["LOONGSAGE_MODEL"], "messages": [{"role": "user", "content": sys.argv[1]}]}
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
)
reply = json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["message"]["content"]
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=5).close()
    reached = "reached"
except OSError:
    reached = "unreachable"
with open("answer.txt", "w") as f:
    f.write(reply + "\\n" + "host router port " + reached + "\\n" + os.environ["OPENAI_BASE_URL"] + "\\n")
"""

AGENT_ARG = AGENT.replace("{", "{{").replace("}", "}}")  # literal braces in a command argument


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(name, marks=pytest.mark.skipif(name not in available_backends(), reason=f"{name} does not work here"))
        for name in ("bwrap", "local")
    ],
)
def test_an_agent_in_the_sandbox_reaches_the_router_and_only_the_router(backend, tiny_model_path):
    tokenizer = load_tokenizer(tiny_model_path)
    engine = StandinEngine(tokenizer)
    router = start_router(engine.url, tiny_model_path, tokenizer)
    try:
        engine.say("The answer is 4.")
        router_port = router.base_url.rsplit(":", 1)[1].split("/")[0]
        agent = build_agent(
            "blackbox",
            {"command": ["python3", "-c", AGENT_ARG, "{prompt}", router_port], "in_sandbox": True, "timeout_s": 120},
        )
        with create_sandbox({"README": "hi\n"}, backend=backend) as sandbox:
            result = agent.run(
                AgentTask("in-sandbox", "What is 2 + 2?", sandbox),
                Endpoint(router.url_for("in-sandbox"), router.router.api_key, "tiny"),
            )
            assert not (sandbox.root / SOCKET_DIR).exists(), "the bridge's socket outlived the episode"
        assert result.exit_status == "exited", result.log
        assert "+The answer is 4." in result.patch
        assert SOCKET_DIR not in result.patch
        (branch,) = router.router.store.get("in-sandbox").branches
        assert "What is 2 + 2?" in branch.turns[0].prompt_text
        if backend == "bwrap":  # no network: the bridge on the sandbox's own loopback, the host out of reach
            assert f"127.0.0.1:{SANDBOX_PORT}/" in result.patch
            assert "+host router port unreachable" in result.patch
        else:  # `local` cannot deny network: the agent is given the router's own URL
            assert router.url_for("in-sandbox") in result.patch
    finally:
        router.stop()
        engine.stop()


def test_host_paths_are_refused_for_an_agent_in_the_sandbox():
    with pytest.raises(ValueError, match=r"\{prompt_file\} is a host path"):
        build_agent("blackbox", {"command": ["cat", "{prompt_file}"], "in_sandbox": True})


def test_the_bridge_carries_a_connection_both_ways(tmp_path):
    """HostEnd relays a connection on its socket to a TCP server and back, byte for byte."""
    from loongsage.agentflow.agents.router_bridge import SOCKET_NAME, HostEnd

    server = socket.create_server(("127.0.0.1", 0))
    host = HostEnd(tmp_path, str(tmp_path), server.getsockname())
    try:
        inside = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        inside.connect(str(tmp_path / SOCKET_DIR / SOCKET_NAME))
        accepted, _ = server.accept()
        payload = bytes(range(256)) * 1024
        inside.sendall(payload)
        received = b""
        while len(received) < len(payload):
            received += accepted.recv(65536)
        accepted.sendall(b"pong")
        assert received == payload and inside.recv(4) == b"pong"
        accepted.close()
        assert inside.recv(1) == b"", "the far end's close did not reach the near end"
    finally:
        host.close()
        server.close()
    assert not (tmp_path / SOCKET_DIR).exists()
