"""Agents chosen in config by name or by import path ("my_pkg.agents:MyAgent")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loongsage.agentflow.agents.base import Agent
from loongsage.registry import Registry

# An entry is a factory called with the config's agent options as keywords, returning an Agent
# (something with `run(task, endpoint)`): a class, or a function annotated to return one.
# Registered by import path: the agents import the openai client (a second of CPU), which every
# process that reads an AgentResult (the reward workers, the controller of a run without an
# agent) would otherwise pay.
AGENTS: Registry[Callable[..., Agent]] = Registry("agent")
AGENTS.register_lazy("chat", "loongsage.agentflow.agents.chat_agent:ChatAgent")
AGENTS.register_lazy("tool", "loongsage.agentflow.agents.tool_agent:ToolAgent")
AGENTS.register_lazy("blackbox", "loongsage.agentflow.agents.blackbox:BlackBoxAgent")
AGENTS.register_lazy("mini_swe_agent", "loongsage.agentflow.agents.miniswe:MiniSweAgent")
AGENTS.register_lazy("opencode", "loongsage.agentflow.agents.opencode:OpenCodeAgent")
AGENTS.register_lazy("claude_code", "loongsage.agentflow.agents.claude_code:ClaudeCodeAgent")
AGENTS.register_lazy("codex", "loongsage.agentflow.agents.codex:CodexAgent")


def build_agent(name_or_path: str, options: dict[str, Any] | None = None) -> Agent:
    """`options` go to the agent's constructor; a wrong one is named with the agent it was meant for."""
    factory = AGENTS.get(name_or_path)
    try:
        return factory(**(options or {}))
    except TypeError as exc:
        raise ValueError(f"agent {name_or_path!r}: bad options {sorted(options or {})}: {exc}") from None
