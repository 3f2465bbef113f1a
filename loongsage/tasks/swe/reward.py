"""The SWE reward for the RL loop: 1.0 when the patch resolves the task, else 0.0.

It never raises: a grading failure costs this sample its reward and is logged and
returned in the metadata (`error`: the grader broke, not the patch), so one broken sandbox
does not stop a run; the controller stops a step where every grading broke.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loongsage.tasks.swe.grading import DEFAULT_TIMEOUT_S, grade
from loongsage.tasks.swe.instance import SweTask, load_tasks

logger = logging.getLogger(__name__)


def swe_reward(task: SweTask, patch: str, backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    return score_patch(task, patch, backend, timeout_s)[0]


def score_patch(
    task: SweTask, patch: str, backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[float, dict[str, Any]]:
    """(reward, {"instance_id", "resolved", "reason", "tests", "error"}); `error` is True
    when grading failed rather than the patch."""
    try:
        result = grade(task, patch, backend=backend, timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 - any grading failure is scored 0, not raised
        reason = f"grading failed: {type(exc).__name__}: {exc}"
        logger.warning("SWE reward for %s: %s", task.instance_id, reason)
        return 0.0, {"instance_id": task.instance_id, "resolved": False, "reason": reason, "tests": {}, "error": True}
    if result.grading_error:
        logger.warning("SWE reward for %s: %s", task.instance_id, result.reason)
    metadata = {
        "instance_id": task.instance_id,
        "resolved": result.resolved,
        "reason": result.reason,
        "tests": result.tests,
        "error": result.grading_error,
    }
    return (1.0 if result.resolved else 0.0), metadata


class SweRewardFn:
    """The framework's `fn(response, label) -> float` reward shape for SWE tasks: the
    response is the patch and the label the task's instance_id."""

    def __init__(
        self, tasks: Iterable[SweTask] | str | Path, backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        loaded = load_tasks(tasks) if isinstance(tasks, (str, Path)) else list(tasks)
        self.tasks = {task.instance_id: task for task in loaded}
        self.backend = backend
        self.timeout_s = timeout_s

    def __call__(self, response: str, label: str) -> float:
        task = self.tasks.get(label)
        if task is None:
            logger.warning("SWE reward: no task with instance_id %r", label)
            return 0.0
        return swe_reward(task, response, self.backend, self.timeout_s)


def episode_reward(item: dict[str, Any], result: Any, backend: str = "auto") -> tuple[float, dict[str, Any]]:
    """An agent episode's reward: its workspace diff graded against the item's task, in a
    sandbox of `backend` (the run's agent.sandbox)."""
    return score_patch(item["task"], result.patch, backend=backend)
