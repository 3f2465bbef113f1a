"""The sandbox preflight, for real: it passes where sandboxes run the framework's Python and
grade a fix, and where they cannot (a PATH without Python, a uid that cannot reach it) it
fails with the reason and the fix, from the function, the check command and a launched run."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from loongsage.agentflow.sandbox import backend_name
from loongsage.tasks.swe.preflight import PreflightError, sandbox_preflight
from loongsage.tasks.swe.suite import build_suite, suite_jsonl
from tests.integration.agentflow.sandbox.sandbox_support import NO_PYTHON, no_python_backends


def assert_names_the_fix(message: str, choose: str) -> None:
    assert choose in message
    if shutil.which("bwrap") is None:
        assert "apt-get install bubblewrap" in message


def test_preflight_passes_here_within_seconds():
    started = time.monotonic()
    summary = sandbox_preflight("auto")
    assert time.monotonic() - started < 20  # a few seconds, even on two busy cores
    assert summary.startswith("sandbox preflight passed in ")
    assert summary.endswith(f"gold patch on the {backend_name('auto')} backend")


@pytest.mark.parametrize("backend", no_python_backends())
def test_preflight_fails_on_a_backend_that_cannot_run_python(backend):
    with pytest.raises(PreflightError) as caught:
        sandbox_preflight(backend, choose="agent.sandbox=NAME")
    message = str(caught.value)
    assert message.startswith(
        f"sandbox preflight failed: a tool call (bash: python -m pytest --version) on the "
        f"{backend} sandbox backend: exit code 127"
    )
    assert "python: command not found" in message
    assert_names_the_fix(message, "agent.sandbox=NAME")


def test_preflight_fails_when_only_the_grading_backend_cannot_run_python():
    with pytest.raises(PreflightError) as caught:
        sandbox_preflight("auto", grading_backend=NO_PYTHON)
    message = str(caught.value)
    assert message.startswith("sandbox preflight failed: grading the gold patch of the bundled task ")
    assert f"on the {NO_PYTHON} sandbox backend: grading error: the local sandbox cannot run pytest" in message
    assert "python: command not found" in message


def test_check_command_stops_before_any_task_with_the_reason_and_the_fix(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(suite_jsonl(build_suite()[:2]))
    done = subprocess.run(
        [sys.executable, "-m", "loongsage.tasks.swe", "check", str(tasks), "--backend", NO_PYTHON],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stdout == ""
    error = done.stderr.splitlines()[-1]
    assert error.startswith(
        f"error: sandbox preflight failed: a tool call (bash: python -m pytest --version) on the {NO_PYTHON} sandbox backend"
    )
    assert "python: command not found" in error
    assert_names_the_fix(error, "--backend NAME")


def test_check_command_reports_the_preflight_that_passed(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(suite_jsonl(build_suite()[:1]))
    done = subprocess.run(
        [sys.executable, "-m", "loongsage.tasks.swe", "check", str(tasks)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sandbox preflight passed in " in done.stderr
    assert done.stdout.splitlines() == [f"{build_suite()[0].instance_id}: ok", "1 tasks: 1 ok, 0 with problems"]


def test_a_run_refuses_to_start_on_a_backend_that_cannot_run_python(tmp_path):
    from tests.integration.launch.launch_support import launch

    result = launch(
        "recipe=agentic_swe", "model=tiny", "run.steps=1", f"agent.sandbox={NO_PYTHON}", f"run.dir={tmp_path}", timeout=600
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "nothing was trained; fix that, then run the same command again" in result.stderr
    assert (
        f"sandbox preflight failed: a tool call (bash: python -m pytest --version) on the {NO_PYTHON} sandbox backend"
    ) in result.stderr, result.stderr[-3000:]
    assert "agent.sandbox=NAME" in result.stderr
    # The framework's own warnings reach the terminal (Hydra's logging preset would silence them).
    assert "[loongsage] WARNING loongsage.agentflow.sandbox.local: the local sandbox backend cannot deny" in result.stderr
    assert "warm start" not in result.stdout and not (tmp_path / "tensorboard").exists()  # before anything trained
