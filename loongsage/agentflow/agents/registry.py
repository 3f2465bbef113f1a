"""Agents chosen in config by name or by import path ("my_pkg.agents:MyAgent")."""
from __future__ import annotations

from typing import Any

from loongsage.agentflow.agents.base import Agent
from loongsage.agentflow.agents.blackbox import BlackBoxAgent
from loongsage.agentflow.agents.chat_agent import ChatAgent
from loongsage.agentflow.agents.miniswe import mini_swe_agent
from loongsage.agentflow.agents.tool_agent import ToolAgent
from loongsage.registry import resolve

AGENTS = {"chat": ChatAgent, "tool": ToolAgent, "blackbox": BlackBoxAgent, "mini_swe_agent": mini_swe_agent}


def build_agent(name_or_path: str, options: dict[str, Any] | None = None) -> Agent:
    """`options` go to the agent's constructor; a wrong one is named with the agent it was meant for."""
    factory = resolve(AGENTS, name_or_path, "agent")
    try:
        return factory(**(options or {}))
    except TypeError as exc:
        raise ValueError(f"agent {name_or_path!r}: bad options {sorted(options or {})}: {exc}") from None
