"""SWE task and prediction records, and their JSONL loaders.

A task line: `instance_id`, `problem_statement`, `files` (path -> content), `FAIL_TO_PASS`,
`PASS_TO_PASS` (pytest node ids), `gold_patch` (unified diff), and optionally `image`,
`repo`, `base_commit`, `test_patch`, `hints`, `difficulty`. A prediction line follows
SWE-bench: `instance_id`, `model_patch`, optional `model_name_or_path`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_REQUIRED_TASK_FIELDS = ("instance_id", "problem_statement", "files", "FAIL_TO_PASS", "PASS_TO_PASS", "gold_patch")
_OPTIONAL_TASK_FIELDS = ("image", "repo", "base_commit", "test_patch", "hints", "difficulty")
_PREDICTION_FIELDS = ("instance_id", "model_patch", "model_name_or_path")


class SweFormatError(ValueError):
    """A task or prediction line that does not have the expected shape; the message
    starts with `path:line:`."""


@dataclass(frozen=True)
class SweTask:
    instance_id: str
    problem_statement: str
    files: dict[str, str]
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    gold_patch: str
    # Cluster tasks (SWE-bench) carry no files: the repo comes from the image or from a
    # checkout of repo at base_commit.
    image: str | None = None
    repo: str | None = None
    base_commit: str | None = None
    # Applied after the model's patch when grading, as the SWE-bench harness does.
    test_patch: str | None = None
    hints: str | None = None
    difficulty: str | None = None

    @property
    def test_ids(self) -> list[str]:
        return [*self.fail_to_pass, *self.pass_to_pass]

    def to_record(self) -> dict[str, Any]:
        """The JSONL form (field names as in SWE-bench); unset optional fields left out."""
        record: dict[str, Any] = {
            "instance_id": self.instance_id,
            "problem_statement": self.problem_statement,
            "files": dict(self.files),
            "FAIL_TO_PASS": list(self.fail_to_pass),
            "PASS_TO_PASS": list(self.pass_to_pass),
            "gold_patch": self.gold_patch,
        }
        for name in _OPTIONAL_TASK_FIELDS:
            if getattr(self, name) is not None:
                record[name] = getattr(self, name)
        return record


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model_patch: str
    model_name_or_path: str | None = field(default=None)


def task_from_record(record: Any) -> SweTask:
    """A validated SweTask from one decoded JSONL object; errors name the field."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - set(_REQUIRED_TASK_FIELDS) - set(_OPTIONAL_TASK_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(map(repr, unknown))}")
    for name in _REQUIRED_TASK_FIELDS:
        if name not in record:
            raise ValueError(f"field {name!r} is missing")
    instance_id = _nonempty_string(record, "instance_id")
    files = _files(record)
    if not files and not record.get("image") and not (record.get("repo") and record.get("base_commit")):
        raise ValueError("field 'files' is empty and neither 'image' nor 'repo' + 'base_commit' is given")
    fail_to_pass = _test_ids(record, "FAIL_TO_PASS")
    if not fail_to_pass:
        raise ValueError("field 'FAIL_TO_PASS' lists no test: every task needs a test that the fix turns green")
    pass_to_pass = _test_ids(record, "PASS_TO_PASS")
    both = sorted(set(fail_to_pass) & set(pass_to_pass))
    if both:
        raise ValueError(f"test(s) in both 'FAIL_TO_PASS' and 'PASS_TO_PASS': {', '.join(both)}")
    return SweTask(
        instance_id=instance_id,
        problem_statement=_nonempty_string(record, "problem_statement"),
        files=files,
        fail_to_pass=fail_to_pass,
        pass_to_pass=pass_to_pass,
        gold_patch=_string(record, "gold_patch"),
        **{name: _optional_string(record, name) for name in _OPTIONAL_TASK_FIELDS},
    )


def prediction_from_record(record: Any) -> Prediction:
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - set(_PREDICTION_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(map(repr, unknown))}")
    for name in ("instance_id", "model_patch"):
        if name not in record:
            raise ValueError(f"field {name!r} is missing")
    # SWE-bench writes null when the model produced no patch; that grades as an empty patch.
    patch = record["model_patch"]
    if patch is not None and not isinstance(patch, str):
        raise ValueError(f"field 'model_patch' must be a string or null, got {type(patch).__name__}")
    return Prediction(
        instance_id=_nonempty_string(record, "instance_id"),
        model_patch=patch or "",
        model_name_or_path=_optional_string(record, "model_name_or_path"),
    )


def load_tasks(path: str | Path) -> list[SweTask]:
    """Every task in a JSONL file, in file order. Blank lines are skipped; a bad line or a
    repeated instance_id raises SweFormatError naming the file, line and field."""
    return load_unique_jsonl(Path(path), task_from_record)


def load_predictions(path: str | Path) -> list[Prediction]:
    """Every prediction in a SWE-bench style JSONL file; one per instance_id."""
    return load_unique_jsonl(Path(path), prediction_from_record)


def load_unique_jsonl(path: Path, parse: Callable[[Any], Any]) -> list[Any]:
    """`parse` applied to every JSON line; items need an `instance_id`, unique in the file.
    Errors raise SweFormatError naming the file and line."""
    items = []
    first_line_of: dict[str, int] = {}
    for line_no, record in _json_lines(path):
        try:
            item = parse(record)
        except ValueError as exc:
            raise SweFormatError(f"{path}:{line_no}: {exc}") from None
        if item.instance_id in first_line_of:
            raise SweFormatError(
                f"{path}:{line_no}: duplicate instance_id {item.instance_id!r} (first on line {first_line_of[item.instance_id]})"
            )
        first_line_of[item.instance_id] = line_no
        items.append(item)
    return items


def _json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SweFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield line_no, json.loads(line)
        except json.JSONDecodeError as exc:
            raise SweFormatError(f"{path}:{line_no}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def _string(record: Mapping[str, Any], name: str) -> str:
    value = record[name]
    if not isinstance(value, str):
        raise ValueError(f"field {name!r} must be a string, got {type(value).__name__}")
    return value


def _nonempty_string(record: Mapping[str, Any], name: str) -> str:
    value = _string(record, name)
    if not value.strip():
        raise ValueError(f"field {name!r} is empty")
    return value


def _optional_string(record: Mapping[str, Any], name: str) -> str | None:
    return None if record.get(name) is None else _string(record, name)


def _test_ids(record: Mapping[str, Any], name: str) -> list[str]:
    value = record[name]
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise ValueError(f"field {name!r} must be a list of pytest node ids (non-empty strings)")
    if len(set(value)) != len(value):
        raise ValueError(f"field {name!r} lists a test more than once")
    return list(value)


def _files(record: Mapping[str, Any]) -> dict[str, str]:
    files = record["files"]
    if not isinstance(files, dict):
        raise ValueError(f"field 'files' must be a mapping of path -> content, got {type(files).__name__}")
    for path, content in files.items():
        if not _is_relative_inside(path):
            raise ValueError(f"field 'files': path {path!r} must be relative and stay inside the repository")
        if not isinstance(content, str):
            raise ValueError(f"field 'files': content of {path!r} must be a string, got {type(content).__name__}")
    return dict(files)


def _is_relative_inside(path: str) -> bool:
    parts = path.split("/")
    return (
        not path.startswith("/")
        and "\\" not in path
        and all(part not in ("", ".", "..") for part in parts)
        and parts[0] != ".git"
    )
