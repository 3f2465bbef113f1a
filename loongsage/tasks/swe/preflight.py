"""Before a run or a check depends on it: can the sandbox backend run an agent's tool and
grade a fix on this machine?

A run whose sandboxes cannot run the framework's Python scores 0 on every patch and trains
on nothing but noise, so this checks for real, in a few seconds: one tool call (the agent's
bash tool runs the framework's pytest) in a sandbox of the agent's backend, and the gold
patch of a bundled task graded in a sandbox of the grading backend. A failure raises
PreflightError naming the backend, what the sandbox printed, and the fix.
"""

from __future__ import annotations

import json
import shutil
import time

from loongsage.agentflow.agents.tools import run_tool
from loongsage.agentflow.sandbox import SandboxError, SandboxLimits, available_backends, backend_name, create_sandbox
from loongsage.tasks.swe.bundled import BUNDLED_TASKS_PATH
from loongsage.tasks.swe.grading import DEFAULT_TIMEOUT_S, grade
from loongsage.tasks.swe.instance import SweTask, load_tasks

_TOOL_COMMAND = "python -m pytest --version"
_MAX_OUTPUT_CHARS = 600


class PreflightError(RuntimeError):
    """The sandbox backend cannot do what the run needs here; the message says the fix."""


def sandbox_preflight(
    backend: str = "auto",
    grading_backend: str | None = None,
    limits: SandboxLimits | None = None,
    choose: str = "agent.sandbox=NAME",
) -> str:
    """Run one tool call on `backend` and grade one gold patch on `grading_backend` (default:
    the same); a one-line summary when both work, else PreflightError. `choose` says how the
    caller picks another backend (a config key, a command-line option)."""
    started = time.monotonic()
    grading_backend = grading_backend or backend
    task = _probe_task()
    _check_tool_call(task, backend, limits or SandboxLimits(), choose)
    _check_grading(task, grading_backend, choose)
    names = sorted({backend_name(backend), backend_name(grading_backend)})
    return (
        f"sandbox preflight passed in {time.monotonic() - started:.1f} s: a tool call and the grading of "
        f"{task.instance_id}'s gold patch on the {' and '.join(names)} backend"
    )


def _probe_task() -> SweTask:
    """A bundled task known to be sound, so that a failure is the backend's and not the task's."""
    return load_tasks(BUNDLED_TASKS_PATH)[0]


def _check_tool_call(task: SweTask, backend: str, limits: SandboxLimits, choose: str) -> None:
    what = f"a tool call (bash: {_TOOL_COMMAND})"
    try:
        with create_sandbox(task.files, backend=backend, limits=limits) as sandbox:
            outcome = run_tool("bash", json.dumps({"command": _TOOL_COMMAND}), sandbox, limits.timeout_s)
    except SandboxError as exc:
        raise PreflightError(_failure(what, backend, f"no sandbox: {exc}", choose)) from exc
    if not outcome.text.startswith("exit code 0\n"):
        raise PreflightError(_failure(what, backend, _tail(outcome.text), choose))


def _check_grading(task: SweTask, backend: str, choose: str) -> None:
    result = grade(task, task.gold_patch, backend=backend, timeout_s=DEFAULT_TIMEOUT_S)
    if not result.resolved:
        raise PreflightError(
            _failure(f"grading the gold patch of the bundled task {task.instance_id}", backend, result.reason, choose)
        )


def _failure(what: str, backend: str, detail: str, choose: str) -> str:
    name = backend_name(backend)
    fixes = []
    if shutil.which("bwrap") is None and name != "bwrap":
        fixes.append("install bubblewrap (apt-get install bubblewrap), whose sandboxes bind the framework's Python in")
    fixes.append(f"choose a backend that works here with {choose} (starts here: {', '.join(available_backends())})")
    return (
        f"sandbox preflight failed: {what} on the {name} sandbox backend: {detail}. "
        f"Every grading would fail and score 0. Fix: {'; or '.join(fixes)}."
    )


def _tail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_OUTPUT_CHARS else "..." + text[-_MAX_OUTPUT_CHARS:]
