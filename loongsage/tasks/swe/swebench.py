"""SWE-bench / SWE-Gym instances as SweTasks, for cluster use.

Those instances carry no files: the repository is materialised on the cluster from the
instance's image or from a checkout of `repo` at `base_commit`. Their test ids come as
JSON-encoded strings in the Hugging Face exports and as lists elsewhere; both are read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loongsage.tasks.swe.instance import SweTask, load_unique_jsonl, task_from_record

_REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS")
# SWE-Gym and SWE-smith name the image `image_name`; some exports use `docker_image`.
_IMAGE_FIELDS = ("image_name", "docker_image")


def task_from_swebench(record: Any) -> SweTask:
    """One SWE-bench style instance as a SweTask; errors name the field."""
    if not isinstance(record, Mapping):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    missing = [name for name in _REQUIRED if name not in record]
    if missing:
        raise ValueError(f"SWE-bench field(s) missing: {', '.join(map(repr, missing))}")
    image = next((record[name] for name in _IMAGE_FIELDS if record.get(name)), None)
    return task_from_record(
        {
            "instance_id": record["instance_id"],
            "problem_statement": record["problem_statement"],
            "files": {},
            "FAIL_TO_PASS": _test_ids(record, "FAIL_TO_PASS"),
            "PASS_TO_PASS": _test_ids(record, "PASS_TO_PASS"),
            "gold_patch": record["patch"],
            "image": image,
            "repo": record["repo"],
            "base_commit": record["base_commit"],
            "test_patch": record["test_patch"],
            "hints": record.get("hints_text") or None,
        }
    )


def load_swebench(path: str | Path) -> list[SweTask]:
    """Every instance in a JSONL export (one instance per line)."""
    return load_unique_jsonl(Path(path), task_from_swebench)


def _test_ids(record: Mapping[str, Any], name: str) -> Any:
    value = record[name]
    if not isinstance(value, str):
        return value  # a list, checked by task_from_record
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"field {name!r} is a string but not a JSON-encoded list ({exc.msg})") from None
