"""Grading a patch against a SWE task, and checking that a task itself is sound.

Every grading starts from a fresh sandbox holding the task's files, so nothing one patch
does can leak into the next. A patch is resolved only when every FAIL_TO_PASS and every
PASS_TO_PASS test passes; a patch that edits tests or test configuration scores 0 before
anything runs, and again if the applied tree shows such an edit.

A grading error is not a wrong patch: when the harness itself broke (no sandbox, the
sandbox cannot run the framework's Python or pytest, git not there or timing out), the
result says `grading_error` and names the backend, so a run can tell a broken grader from
a model that fixes nothing. A missing JUnit report counts as a grading error only when the
sandbox cannot run pytest at all; otherwise the patch broke pytest (it scores 0).
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

from loongsage.agentflow.sandbox import Sandbox, SandboxError, SandboxLimits, backend_name, create_sandbox
from loongsage.tasks.swe.instance import SweTask
from loongsage.tasks.swe.junit import NOT_FOUND, PASSED, outcomes_from_junit
from loongsage.tasks.swe.patches import forbidden_paths, node_id_file, touched_paths

DEFAULT_TIMEOUT_S = 60.0
NOT_RUN = "not run"
# Where pytest writes its report inside the tree. Emptied before each run, and the file
# name is random, so a report planted by the patch is never read.
_SCRATCH = ".loongsage-grading"
# pytest's exit statuses when the tests ran: all passed, some failed.
_TESTS_RAN = (0, 1)
# The host's pytest plugins (hypothesis, hydra, ...) are not the task's, and loading them
# costs seconds per run.
_PYTEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
_GIT_TIMEOUT_S = 30.0
# `git apply --check` first, so that a patch that does not apply changes nothing. The
# patch comes on stdin and waits in the sandbox's temp dir, outside the tree.
_APPLY = (
    'patch_file=$(mktemp) && cat > "$patch_file" && git apply --check "$patch_file" && git apply "$patch_file"; '
    'status=$?; rm -f "$patch_file"; exit $status'
)
_NO_FILES = "task has no files: it can only be graded inside its container image"
# Whether the sandbox can run pytest at all, asked when a run left no report. The tree's
# directory is dropped from sys.path so that a `pytest.py` planted by the patch cannot make
# the harness look broken.
_HARNESS_PROBE = 'python -c "import sys; del sys.path[0]; import pytest"'
# bash's "cannot execute" and "command not found": a tool the harness needs is missing.
_MISSING_TOOL = (126, 127)
_MAX_LISTED = 5
_MAX_MESSAGE_CHARS = 600


@dataclass(frozen=True)
class GradeResult:
    instance_id: str
    resolved: bool
    reason: str
    tests: dict[str, bool] = field(default_factory=dict)
    # True when grading itself failed (no sandbox, no files to run), not the patch.
    grading_error: bool = False


class PatchRejected(Exception):
    """A patch that cannot be graded as a fix; the message is the reason it scores 0."""


class HarnessError(Exception):
    """The grading harness could not run in the sandbox (not the patch's fault); the
    message names the backend and what the sandbox printed."""


@dataclass(frozen=True)
class PytestRun:
    outcomes: dict[str, str]  # node id -> passed | failed | error | skipped | not found | not run
    problem: str | None = None  # why the run cannot count: a timeout, no report, pytest stopped early


def grade(task: SweTask, patch: str, backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> GradeResult:
    """Apply `patch` in a fresh sandbox and run the task's tests there."""
    if not task.files:
        return GradeResult(task.instance_id, False, _NO_FILES, grading_error=True)
    refusal = refusal_reason(task, patch)
    if refusal is not None:
        return GradeResult(task.instance_id, False, refusal)
    try:
        run = run_with_patch(task, patch, backend, timeout_s)
    except PatchRejected as exc:
        return GradeResult(task.instance_id, False, str(exc))
    except HarnessError as exc:
        return GradeResult(task.instance_id, False, f"grading error: {exc}", grading_error=True)
    except SandboxError as exc:
        return GradeResult(task.instance_id, False, f"sandbox error ({backend_name(backend)} backend): {exc}", grading_error=True)
    return verdict(task, run)


def check(task: SweTask, backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """The task's problems, empty when it is sound: without a patch every FAIL_TO_PASS
    test fails and every PASS_TO_PASS test passes; with the gold patch all pass; the gold
    patch leaves tests and test configuration alone; every node id exists."""
    if not task.files:
        return [_NO_FILES]
    gold_problems = _gold_patch_problems(task)
    problems = list(gold_problems)
    try:
        before = run_with_patch(task, None, backend, timeout_s)
        problems += _problems_before_fix(task, before)
        if not gold_problems:  # an empty or test-editing gold patch would only be refused again
            problems += _problems_after_fix(task, run_with_patch(task, task.gold_patch, backend, timeout_s))
    except PatchRejected as exc:
        problems.append(f"gold patch: {exc}")
    except HarnessError as exc:
        problems.append(f"grading error: {exc}")
    except SandboxError as exc:
        problems.append(f"sandbox error ({backend_name(backend)} backend): {exc}")
    return problems


def refusal_reason(task: SweTask, patch: str) -> str | None:
    """Why `patch` scores 0 without running anything, or None."""
    if not patch.strip():
        return "empty patch"
    forbidden = forbidden_paths(patch, protected_paths(task))
    if forbidden:
        return f"patch touches tests or test configuration: {_listed(forbidden)}"
    return None


def protected_paths(task: SweTask) -> set[str]:
    """Paths a fix may not touch beyond the generic test and config names: the files the
    node ids live in and those the task's test_patch writes."""
    paths = {node_id_file(node_id) for node_id in task.test_ids}
    return paths | set(touched_paths(task.test_patch or ""))


def run_with_patch(task: SweTask, patch: str | None, backend: str, timeout_s: float) -> PytestRun:
    """The task's tests in a fresh sandbox after `patch` (None: the unfixed tree) and then
    the task's test_patch. Raises PatchRejected when a patch does not apply or the
    applied tree shows an edit to a protected path."""
    with create_sandbox(task.files, backend=backend, limits=SandboxLimits(timeout_s=timeout_s)) as sandbox:
        if patch is not None:
            _apply(sandbox, patch, "patch")
            _reject_protected_changes(sandbox, task)
        if task.test_patch:
            _apply(sandbox, task.test_patch, "the task's test_patch")
        return run_tests(sandbox, task.test_ids, timeout_s)


def run_tests(sandbox: Sandbox, node_ids: list[str], timeout_s: float) -> PytestRun:
    """One pytest run over the test files the node ids live in (as the SWE-bench harness
    runs whole files), then each node id's outcome from the JUnit report. Files that do
    not exist are left out, so their node ids come back "not found" instead of pytest
    refusing the whole run; when none exists pytest gets them all and says which."""
    files = " ".join(shlex.quote(path) for path in dict.fromkeys(map(node_id_file, node_ids)))
    report = f"{_SCRATCH}/junit-{secrets.token_hex(8)}.xml"
    command = (
        f'rm -rf {_SCRATCH}; set --; for f in {files}; do [ -e "$f" ] && set -- "$@" "$f"; done; '
        f"[ $# -gt 0 ] || set -- {files}; "
        f"python -m pytest -q -p no:cacheprovider --rootdir=. --continue-on-collection-errors "
        f'--junitxml={report} "$@"'
    )
    result = sandbox.exec(command, timeout_s=timeout_s, env=_PYTEST_ENV)
    not_run = dict.fromkeys(node_ids, NOT_RUN)
    if result.timed_out:
        return PytestRun(not_run, f"pytest timed out after {timeout_s:g} s")
    try:
        outcomes = outcomes_from_junit(sandbox.read_file(report), node_ids)
    except (SandboxError, ValueError) as exc:
        _check_harness(sandbox)
        output = _tail(result.stdout + result.stderr)
        return PytestRun(not_run, f"pytest gave no usable report (exit status {result.exit_code}; {exc}): {output}")
    if result.exit_code not in _TESTS_RAN:
        output = _tail(result.stdout + result.stderr)
        return PytestRun(outcomes, f"pytest stopped with exit status {result.exit_code}: {output}")
    return PytestRun(outcomes)


def verdict(task: SweTask, run: PytestRun) -> GradeResult:
    tests = {node_id: outcome == PASSED for node_id, outcome in run.outcomes.items()}
    failing = [
        f"{kind} not passing: {_listed(f'{node_id} ({run.outcomes[node_id]})' for node_id in node_ids)}"
        for kind, node_ids in _failing_by_kind(task, tests)
    ]
    if not failing and run.problem is None:
        return GradeResult(task.instance_id, True, f"all {len(tests)} tests pass", tests)
    return GradeResult(task.instance_id, False, "; ".join(filter(None, [run.problem, *failing])), tests)


def _apply(sandbox: Sandbox, patch: str, what: str) -> None:
    # Models often drop a patch's final newline, which git reads as a corrupt last hunk.
    result = sandbox.exec(_APPLY, timeout_s=_GIT_TIMEOUT_S, stdin=patch if patch.endswith("\n") else patch + "\n")
    if result.timed_out:
        raise HarnessError(
            f"applying the {what} in the {sandbox.backend} sandbox timed out after "
            f"{_GIT_TIMEOUT_S:g} s: {_tail(result.stderr or result.stdout)}"
        )
    if result.exit_code in _MISSING_TOOL:
        raise HarnessError(
            f"the {sandbox.backend} sandbox cannot run git to apply the {what} "
            f"(exit status {result.exit_code}): {_tail(result.stderr or result.stdout)}"
        )
    if result.exit_code != 0:
        raise PatchRejected(f"{what} does not apply: {_tail(result.stderr or result.stdout)}")


def _check_harness(sandbox: Sandbox) -> None:
    """Raise HarnessError when the sandbox cannot run the framework's Python with pytest."""
    result = sandbox.exec(_HARNESS_PROBE, timeout_s=_GIT_TIMEOUT_S)
    if result.timed_out or result.exit_code != 0:
        status = "timed out" if result.timed_out else f"exited {result.exit_code}"
        raise HarnessError(
            f"the {sandbox.backend} sandbox cannot run pytest (`{_HARNESS_PROBE}` {status}): "
            f"{_tail(result.stderr or result.stdout)}"
        )


def _reject_protected_changes(sandbox: Sandbox, task: SweTask) -> None:
    changes = sandbox.diff()
    if not changes.strip():
        raise PatchRejected("patch applied but changed nothing")
    forbidden = forbidden_paths(changes, protected_paths(task))
    if forbidden:
        raise PatchRejected(f"patch touches tests or test configuration: {_listed(forbidden)}")


def _gold_patch_problems(task: SweTask) -> list[str]:
    if not task.gold_patch.strip():
        return ["gold patch is empty"]
    forbidden = forbidden_paths(task.gold_patch, protected_paths(task))
    return [f"gold patch touches tests or test configuration: {_listed(forbidden)}"] if forbidden else []


def _problems_before_fix(task: SweTask, run: PytestRun) -> list[str]:
    problems = [f"without the fix: {run.problem}"] if run.problem else []
    problems += [
        f"FAIL_TO_PASS test passes without the fix: {node_id}" for node_id in task.fail_to_pass if run.outcomes[node_id] == PASSED
    ]
    problems += [
        f"PASS_TO_PASS test does not pass without the fix: {node_id} ({run.outcomes[node_id]})"
        for node_id in task.pass_to_pass
        if run.outcomes[node_id] != PASSED and not run.problem
    ]
    return problems


def _problems_after_fix(task: SweTask, run: PytestRun) -> list[str]:
    problems = [f"with the gold patch: {run.problem}"] if run.problem else []
    for node_id in task.test_ids:
        outcome = run.outcomes[node_id]
        if outcome == NOT_FOUND:
            problems.append(f"test not found: {node_id}")
        elif outcome != PASSED and not run.problem:
            problems.append(f"test does not pass with the gold patch: {node_id} ({outcome})")
    return problems


def _failing_by_kind(task: SweTask, tests: dict[str, bool]) -> list[tuple[str, list[str]]]:
    by_kind = [
        ("FAIL_TO_PASS", [node_id for node_id in task.fail_to_pass if not tests[node_id]]),
        ("PASS_TO_PASS", [node_id for node_id in task.pass_to_pass if not tests[node_id]]),
    ]
    return [(kind, node_ids) for kind, node_ids in by_kind if node_ids]


def _listed(items: Iterable[str]) -> str:
    items = list(items)
    shown = ", ".join(items[:_MAX_LISTED])
    return shown if len(items) <= _MAX_LISTED else f"{shown} and {len(items) - _MAX_LISTED} more"


def _tail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE_CHARS else "..." + text[-_MAX_MESSAGE_CHARS:]
