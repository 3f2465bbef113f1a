"""The simplest agent: one chat completion, whose reply is the answer. It lets single-turn
data (math, QA) run through the router beside tool-using agents in one mixed batch."""

from __future__ import annotations

import openai

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint
from loongsage.agentflow.agents.sampling import request_sampling


class ChatAgent:
    """Sampling options are overrides: None is not sent, and the router applies the run's
    rollout.* block. The system prompt is the task's (data.system_prompt / data.mix[i].system_prompt)."""

    def __init__(
        self,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        request_timeout_s: float = 600.0,
    ):
        self.sampling = request_sampling(max_tokens, temperature, top_p, top_k)
        self.request_timeout_s = request_timeout_s

    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        messages = [{"role": "user", "content": task.prompt}]
        if task.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": task.system_prompt})
        with openai.OpenAI(
            base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=self.request_timeout_s, max_retries=0
        ) as client:
            try:
                response = client.chat.completions.create(model=endpoint.model, messages=messages, **self.sampling)
            except openai.OpenAIError as exc:
                return AgentResult(exit_status="error", turns=1, error=f"{type(exc).__name__}: {exc}")
        answer = response.choices[0].message.content or ""
        return AgentResult(exit_status="submitted", turns=1, answer=answer, log=[answer[:200]])
