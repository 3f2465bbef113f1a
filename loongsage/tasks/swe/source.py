"""SWE tasks as a data source of agent episodes."""

from __future__ import annotations

from typing import Any

from loongsage.tasks.swe.bundled import BUNDLED_TASKS_PATH
from loongsage.tasks.swe.demonstration import gold_tool_calls
from loongsage.tasks.swe.instance import SweTask, load_tasks
from loongsage.tasks.swe.patches import is_protected_path
from loongsage.tasks.swe.synth import synth_task

DIFFICULTIES = ("easy", "medium", "hard")
SHOWN_CHARS = 6000  # source shown in the prompt at most; bigger repositories are explored with tools


def swe_tasks(
    path: str | None = None, difficulty: str | list[str] | None = None, limit: int | None = None, show_files: bool = False
) -> list[dict[str, Any]]:
    """Items from a SWE task JSONL (default: the bundled suite), optionally only some difficulties."""
    tasks = load_tasks(path or BUNDLED_TASKS_PATH)
    if difficulty is not None:
        wanted = [difficulty] if isinstance(difficulty, str) else list(difficulty)
        unknown = sorted(set(wanted) - set(DIFFICULTIES))
        if unknown:
            raise ValueError(f"data.options.difficulty: {unknown} not among {', '.join(DIFFICULTIES)}")
        tasks = [task for task in tasks if task.difficulty in wanted]
    if limit is not None:
        tasks = tasks[:limit]
    return task_items(tasks, show_files)


def swe_synth(
    count: int = 256, seed: int = 0, start: int = 0, functions: int = 3, show_files: bool = True
) -> list[dict[str, Any]]:
    """Synthesized tasks `start .. start+count-1` of generator `seed`: disjoint ranges (or
    seeds) give disjoint training, warm-start and held-out sets."""
    return task_items([synth_task(seed, index, functions) for index in range(start, start + count)], show_files)


def task_items(tasks: list[SweTask], show_files: bool) -> list[dict[str, Any]]:
    """Items `{"id", "prompt", "label" (instance_id), "task", "demonstration"}`: the prompt is the
    problem statement, followed by the source files (not the tests) when `show_files`; the
    demonstration is the gold patch as tool calls (None where it cannot be written as such)."""
    return [
        {
            "id": task.instance_id,
            "prompt": task_prompt(task, show_files),
            "label": task.instance_id,
            "task": task,
            "demonstration": gold_tool_calls(task),
        }
        for task in tasks
    ]


def task_prompt(task: SweTask, show_files: bool) -> str:
    if not show_files or not task.files:
        return task.problem_statement
    shown, left = [], SHOWN_CHARS
    for path, content in sorted(task.files.items()):
        if is_protected_path(path) or not path.endswith(".py") or len(content) > left:
            continue
        shown.append(f"{path}:\n```python\n{content}```")
        left -= len(content)
    return "\n\n".join([task.problem_statement.rstrip("\n"), *shown])
