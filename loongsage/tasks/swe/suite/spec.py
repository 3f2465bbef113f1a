"""How a bundled task is written down: the repository as it should be, plus the edits
that inject the bug. The task's files are the buggy tree and its gold patch is the diff
back to the correct one, so the two can never disagree."""

from __future__ import annotations

import difflib
import textwrap
from dataclasses import dataclass

from loongsage.tasks.swe.instance import SweTask


def source(text: str) -> str:
    """A file's content written as an indented triple-quoted string in the suite."""
    return textwrap.dedent(text).lstrip("\n")


@dataclass(frozen=True)
class Bug:
    """Replace the one occurrence of `fixed` in `path` by `buggy`."""

    path: str
    fixed: str
    buggy: str


@dataclass(frozen=True)
class SuiteTask:
    instance_id: str
    difficulty: str  # easy: a one-token or one-line fix in one short file the issue names
    problem_statement: str
    files: dict[str, str]  # the correct repository
    bugs: tuple[Bug, ...]
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]

    def to_task(self) -> SweTask:
        buggy_files = dict(self.files)
        for bug in self.bugs:
            buggy_files[bug.path] = _inject(self.instance_id, buggy_files, bug)
        changed = sorted(path for path in self.files if buggy_files[path] != self.files[path])
        return SweTask(
            instance_id=self.instance_id,
            problem_statement=source(self.problem_statement).rstrip("\n") + "\n",
            files=buggy_files,
            fail_to_pass=list(self.fail_to_pass),
            pass_to_pass=list(self.pass_to_pass),
            gold_patch="".join(unified_diff(path, buggy_files[path], self.files[path]) for path in changed),
            difficulty=self.difficulty,
        )


def unified_diff(path: str, old: str, new: str) -> str:
    """A git-style diff of one file, as `git diff` prints it (a/ and b/ prefixes, three
    lines of context), which `git apply` accepts."""
    if not old.endswith("\n") or not new.endswith("\n"):
        raise ValueError(f"{path}: suite files must end with a newline")
    hunks = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3)
    body = "".join(hunks)
    return f"diff --git a/{path} b/{path}\n{body}" if body else ""


def _inject(instance_id: str, files: dict[str, str], bug: Bug) -> str:
    if bug.path not in files:
        raise ValueError(f"{instance_id}: bug in {bug.path!r}, which is not one of the task's files")
    text = files[bug.path]
    count = text.count(bug.fixed)
    if count != 1:
        raise ValueError(f"{instance_id}: {bug.fixed!r} occurs {count} times in {bug.path!r}, expected once")
    return text.replace(bug.fixed, bug.buggy)
