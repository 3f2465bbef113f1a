"""The white-box agent: the framework's own multi-turn tool loop.

It talks to the model only through an OpenAI-compatible endpoint with the official `openai`
client, exactly as a third-party agent would, so what the router records for training is what
any agent would produce.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import openai

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint
from loongsage.agentflow.agents.sampling import request_sampling
from loongsage.agentflow.agents.tools import TOOL_NAMES, TOOL_SCHEMAS, run_tool, truncate_middle

# When the task brings none (data.system_prompt unset).
DEFAULT_SYSTEM_PROMPT = (
    "You fix bugs in a Python repository. Use the tools to look at files, edit them and run the tests. "
    "Call submit when the bug is fixed."
)


@dataclass(frozen=True)
class ToolAgentConfig:
    max_turns: int = 8  # model calls per episode
    context_budget: int = 4096  # prompt + completion tokens a turn may reach
    max_tool_output_chars: int = 2000  # longer tool results keep their head and tail
    command_timeout_s: float = 30.0
    # Sampling overrides. None: not sent, so the router applies the run's rollout.temperature /
    # top_p / top_k / max_new_tokens. The system prompt is the task's (data.system_prompt).
    max_tokens: int | None = None  # completion tokens per turn
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # sent as extra_body (vLLM/SGLang extension); -1: off
    request_timeout_s: float = 600.0
    tools: tuple[str, ...] = TOOL_NAMES  # the tools the model is offered (submit is always among them)


class ToolAgent:
    def __init__(self, config: ToolAgentConfig | None = None, **overrides):
        base = config or ToolAgentConfig()
        self.config = ToolAgentConfig(**{**base.__dict__, **overrides})
        offered = tuple(dict.fromkeys([*self.config.tools, "submit"]))
        unknown = [name for name in offered if name not in TOOL_NAMES]
        if unknown:
            raise ValueError(f"tool agent option tools: unknown {unknown}; available: {', '.join(TOOL_NAMES)}")
        self.tool_schemas = [schema for schema in TOOL_SCHEMAS if schema["function"]["name"] in offered]
        self.nudge = f"Call one of the tools: {', '.join(offered)}."

    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        cfg = self.config
        client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=cfg.request_timeout_s, max_retries=0)
        messages = self._opening(task)
        result = AgentResult(exit_status="max_turns")
        try:
            for turn in range(cfg.max_turns):
                result.turns = turn + 1
                response = client.chat.completions.create(
                    model=endpoint.model,
                    messages=messages,
                    tools=self.tool_schemas,
                    **request_sampling(cfg.max_tokens, cfg.temperature, cfg.top_p, cfg.top_k),
                )
                message = response.choices[0].message
                messages.append(_assistant_message(message))
                result.log.append(_summary(message))
                if self._finished(message, messages, task, result):
                    break
                if response.usage is not None and self._out_of_budget(response.usage.total_tokens):
                    result.exit_status = "context_exhausted"
                    break
        except openai.OpenAIError as exc:
            result.exit_status, result.error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            client.close()
        if task.sandbox is not None:
            result.patch = task.sandbox.diff()
        return result

    def demonstration(self, task: AgentTask, calls: list[dict], model: str) -> dict:
        """The chat request an episode ends with when the model makes `calls` ({name, arguments}),
        one per turn, each run for real in the task's sandbox: what a warm start imitates.
        `model`: the served name (unused here: nothing this agent sends names it)."""
        messages = self._opening(task)
        for number, call in enumerate(calls):
            arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
            call_id = f"call_demo_{number}"
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": arguments}}
                    ],
                }
            )
            outcome = run_tool(call["name"], arguments, task.sandbox, self.config.command_timeout_s)
            if outcome.submitted:
                break
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": truncate_middle(outcome.text, self.config.max_tool_output_chars),
                }
            )
        return {"messages": messages, "tools": self.tool_schemas}

    def _out_of_budget(self, total_tokens: int) -> bool:
        """Whether the next turn cannot fit in context_budget, judged by this turn's prompt + reply
        (the next prompt holds them all). With its own max_tokens the agent keeps room for a whole
        reply. Without one the reply's length is the run's rollout.max_new_tokens, which the router
        applies (clipped to the model's context) and the agent is not told: it keeps room for one
        token, i.e. stops once the budget is spent."""
        reserve = self.config.max_tokens if self.config.max_tokens is not None else 1
        return total_tokens + reserve > self.config.context_budget

    def _opening(self, task: AgentTask) -> list[dict]:
        system = task.system_prompt if task.system_prompt is not None else DEFAULT_SYSTEM_PROMPT
        return [{"role": "system", "content": system}, {"role": "user", "content": task.prompt}]

    def _finished(self, message, messages: list[dict], task: AgentTask, result: AgentResult) -> bool:
        """Runs the turn's tool calls (appending their results); True once the agent submitted."""
        if not message.tool_calls:
            messages.append({"role": "user", "content": self.nudge})
            return False
        for call in message.tool_calls:
            outcome = run_tool(call.function.name, call.function.arguments, task.sandbox, self.config.command_timeout_s)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": truncate_middle(outcome.text, self.config.max_tool_output_chars),
                }
            )
            if outcome.submitted:
                result.exit_status, result.answer = "submitted", outcome.answer
                return True
        return False


def _assistant_message(message) -> dict:
    """The reply exactly as received, so the router recognises it as its own on the next turn."""
    out: dict = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}
            for call in message.tool_calls
        ]
    return out


def _summary(message) -> str:
    if message.tool_calls:
        return "; ".join(f"{c.function.name}({truncate_middle(c.function.arguments, 120)})" for c in message.tool_calls)
    return "text: " + truncate_middle(message.content or "", 120)
