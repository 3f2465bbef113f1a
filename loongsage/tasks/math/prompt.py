"""The one chat prompt shape shared by every math data source."""

from __future__ import annotations

ANSWER_INSTRUCTION = "Give the final answer as \\boxed{number}."


def math_prompt(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{question.strip()} {ANSWER_INSTRUCTION}"}]
