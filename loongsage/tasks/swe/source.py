"""SWE tasks as a data source of agent episodes."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from loongsage.tasks.swe.instance import load_tasks

BUNDLED_TASKS_PATH = Path(__file__).parent / "data" / "swe_tasks.jsonl"
DIFFICULTIES = ("easy", "medium", "hard")


def swe_tasks(path: str | None = None, difficulty: str | list[str] | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Items `{"id", "prompt" (the problem statement), "label" (instance_id), "task"}` from a
    SWE task JSONL (default: the bundled suite), optionally only some difficulties."""
    tasks = load_tasks(path or BUNDLED_TASKS_PATH)
    if difficulty is not None:
        wanted = [difficulty] if isinstance(difficulty, str) else list(difficulty)
        unknown = sorted(set(wanted) - set(DIFFICULTIES))
        if unknown:
            raise ValueError(f"data.options.difficulty: {unknown} not among {', '.join(DIFFICULTIES)}")
        tasks = [task for task in tasks if task.difficulty in wanted]
    if limit is not None:
        tasks = tasks[:limit]
    return [{"id": task.instance_id, "prompt": task.problem_statement, "label": task.instance_id, "task": task}
            for task in tasks]
