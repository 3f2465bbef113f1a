"""The agentic workload of `python -m loongsage.bench async`: multi-turn episodes whose every
turn is one model call through the router and one command in the episode's real sandbox that
takes a long-tailed time (a stand-in for test suites, builds and web tools, whose latencies
are lognormal with a heavy tail). Latencies are a pure function of the task seed, so the
synchronous and asynchronous runs face exactly the same environment."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import openai

from loongsage.agentflow.agents.base import AgentResult, AgentTask, Endpoint


@dataclass
class Workspace:
    files: dict[str, str] = field(default_factory=dict)


def latency_tasks(
    count: int = 256, seed: int = 0, turns: int = 3, median_s: float = 0.4, sigma: float = 1.0, cap_s: float = 12.0
) -> list[dict]:
    """`count` tasks, each with `turns` environment latencies drawn from lognormal(median_s, sigma),
    capped at cap_s seconds."""
    items = []
    for index in range(count):
        rng = random.Random(f"latency:{seed}:{index}")
        latencies = [min(median_s * math.exp(sigma * rng.gauss(0.0, 1.0)), cap_s) for _ in range(turns)]
        items.append(
            {
                "id": f"latency-{seed}-{index}",
                "prompt": f"Task {index}: inspect notes.txt and describe it in a few words.",
                "label": "",
                "task": Workspace({"notes.txt": f"task {index}\n" * (1 + index % 7)}),
                "metadata": {"latencies": latencies},
            }
        )
    return items


class LatencyAgent:
    """Model call, then the environment's answer from the sandbox, `len(latencies)` times."""

    def __init__(self, max_tokens: int = 16, request_timeout_s: float = 600.0):
        self.max_tokens = max_tokens
        self.request_timeout_s = request_timeout_s

    def run(self, task: AgentTask, endpoint: Endpoint) -> AgentResult:
        latencies = task.metadata["latencies"]
        messages = [{"role": "user", "content": task.prompt}]
        reply = ""
        with openai.OpenAI(
            base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=self.request_timeout_s, max_retries=0
        ) as client:
            for latency in latencies:
                response = client.chat.completions.create(
                    model=endpoint.model, messages=messages, max_tokens=self.max_tokens, temperature=1.0
                )
                reply = response.choices[0].message.content or ""
                observation = task.sandbox.exec(f"sleep {latency:.3f}; wc -c notes.txt", timeout_s=latency + 30)
                messages += [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": f"output: {observation.stdout.strip()}"},
                ]
        return AgentResult(exit_status="submitted", turns=len(latencies), answer=reply, log=[reply[:80]])


def e_fraction_reward(item: dict, result: AgentResult) -> tuple[float, dict]:
    """A reward with spread for any model (the share of 'e' in the last reply): the benchmark
    measures time, not learning."""
    answer = result.answer or ""
    return answer.count("e") / max(len(answer), 1), {}
