"""What an agent is given and what it gives back.

An agent solves one task through an OpenAI-compatible endpoint. It never sees the token
bookkeeping: the router behind `base_url` records every turn for training, so the same agent
code runs under RL, in evaluation, or against any hosted model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from loongsage.agentflow.sandbox import Sandbox


@dataclass
class AgentTask:
    instance_id: str
    prompt: str  # the problem statement / instruction the agent starts from
    sandbox: Sandbox | None = None  # where the agent's commands run, when the task has a workspace
    metadata: dict[str, Any] = field(default_factory=dict)
    # data.system_prompt (or the item's data.mix[i].system_prompt): the run's one place for it.
    # None: the agent's own default (the tool agent's built-in prompt; none for the chat agent).
    system_prompt: str | None = None


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible endpoint: for training, the router's per-trajectory URL."""

    base_url: str
    api_key: str
    model: str


@dataclass
class AgentResult:
    # submitted | max_turns | context_exhausted | error | exited (black-box program ended on its own)
    exit_status: str
    turns: int = 0
    answer: str | None = None  # what the agent submitted, if anything
    patch: str = ""  # the workspace's diff against its snapshot at the end
    error: str | None = None
    log: list[str] = field(default_factory=list)  # short human-readable trace for rollouts.jsonl


class Agent(Protocol):
    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult: ...
