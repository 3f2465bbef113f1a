"""Agents: the white-box tool agent the framework drives, and black-box programs it runs."""

from loongsage.agentflow.agents.base import Agent, AgentResult, AgentTask, Endpoint
from loongsage.agentflow.agents.registry import AGENTS, build_agent

__all__ = ["AGENTS", "Agent", "AgentResult", "AgentTask", "Endpoint", "build_agent"]
