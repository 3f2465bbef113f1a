"""The bundled SWE suite: small pure-Python repositories, each with one injected bug.

`python -m loongsage.tasks.swe.suite` rebuilds data/swe_tasks.jsonl from the repositories
written down in the repos_*.py modules.
"""

from __future__ import annotations

import json
from pathlib import Path

from loongsage.tasks.swe.bundled import BUNDLED_TASKS_PATH
from loongsage.tasks.swe.instance import SweTask
from loongsage.tasks.swe.suite import repos_apps, repos_numbers, repos_parsing, repos_structures, repos_text
from loongsage.tasks.swe.suite.spec import SuiteTask

SUITE_TASKS: list[SuiteTask] = [
    *repos_numbers.TASKS,
    *repos_text.TASKS,
    *repos_structures.TASKS,
    *repos_parsing.TASKS,
    *repos_apps.TASKS,
]


def build_suite() -> list[SweTask]:
    """The tasks with their buggy files and gold patches, in a fixed order."""
    tasks = [suite_task.to_task() for suite_task in SUITE_TASKS]
    ids = [task.instance_id for task in tasks]
    repeated = sorted({instance_id for instance_id in ids if ids.count(instance_id) > 1})
    if repeated:
        raise ValueError(f"suite instance_id used more than once: {', '.join(repeated)}")
    return tasks


def suite_jsonl(tasks: list[SweTask]) -> str:
    return "".join(json.dumps(task.to_record(), ensure_ascii=False) + "\n" for task in tasks)


def write_suite(path: str | Path = BUNDLED_TASKS_PATH) -> list[SweTask]:
    tasks = build_suite()
    Path(path).write_text(suite_jsonl(tasks), encoding="utf-8")
    return tasks
