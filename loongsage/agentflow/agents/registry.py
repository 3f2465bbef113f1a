"""Agents chosen in config by name or by import path ("my_pkg.agents:MyAgent")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loongsage.agentflow.agents.base import Agent
from loongsage.agentflow.agents.blackbox import BlackBoxAgent
from loongsage.agentflow.agents.chat_agent import ChatAgent
from loongsage.agentflow.agents.miniswe import MiniSweAgent
from loongsage.agentflow.agents.opencode import OpenCodeAgent
from loongsage.agentflow.agents.tool_agent import ToolAgent
from loongsage.registry import Registry

# An entry is a factory called with the config's agent options as keywords, returning an Agent
# (something with `run(task, endpoint)`): a class, or a function annotated to return one.
AGENTS: Registry[Callable[..., Agent]] = Registry("agent")
AGENTS.register("chat", ChatAgent)
AGENTS.register("tool", ToolAgent)
AGENTS.register("blackbox", BlackBoxAgent)
AGENTS.register("mini_swe_agent", MiniSweAgent)
AGENTS.register("opencode", OpenCodeAgent)


def build_agent(name_or_path: str, options: dict[str, Any] | None = None) -> Agent:
    """`options` go to the agent's constructor; a wrong one is named with the agent it was meant for."""
    factory = AGENTS.get(name_or_path)
    try:
        return factory(**(options or {}))
    except TypeError as exc:
        raise ValueError(f"agent {name_or_path!r}: bad options {sorted(options or {})}: {exc}") from None
