"""The simplest agent: one chat completion, whose reply is the answer. It lets single-turn
data (math, QA) run through the router beside tool-using agents in one mixed batch."""
from __future__ import annotations

import openai

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint


class ChatAgent:
    def __init__(self, max_tokens: int = 128, temperature: float = 1.0, system_prompt: str | None = None,
                 request_timeout_s: float = 600.0):
        self.max_tokens, self.temperature = max_tokens, temperature
        self.system_prompt = system_prompt
        self.request_timeout_s = request_timeout_s

    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        messages = [{"role": "user", "content": task.prompt}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        with openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=self.request_timeout_s,
                           max_retries=0) as client:
            try:
                response = client.chat.completions.create(model=endpoint.model, messages=messages,
                                                          max_tokens=self.max_tokens, temperature=self.temperature)
            except openai.OpenAIError as exc:
                return AgentResult(exit_status="error", turns=1, error=f"{type(exc).__name__}: {exc}")
        answer = response.choices[0].message.content or ""
        return AgentResult(exit_status="submitted", turns=1, answer=answer, log=[answer[:200]])
