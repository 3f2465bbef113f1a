"""Helpers for the sandbox tests: which backends run here, what is running on the host, and
backends that cannot run the framework's Python (by import path, also from subprocesses)."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time

import pytest

from loongsage.agentflow.sandbox import available_backends
from loongsage.agentflow.sandbox.local import LocalSandbox
from loongsage.agentflow.sandbox.uid_reach import sandbox_uid_blocker

RUNNABLE = ["bwrap", "local"]


def backend_params() -> list:
    """One pytest param per backend that runs commands, skipped where it does not work."""
    return [
        pytest.param(
            name,
            marks=pytest.mark.skipif(name not in available_backends(), reason=f"sandbox backend {name!r} does not work here"),
        )
        for name in RUNNABLE
    ]


def _proc_entries():
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            yield entry.path


def processes_running(argv: list[str]) -> list[int]:
    """Pids of live (not zombie) host processes whose command line is exactly `argv`."""
    wanted = ("\0".join(argv) + "\0").encode()
    found = []
    for path in _proc_entries():
        try:
            with open(f"{path}/cmdline", "rb") as cmdline:
                if cmdline.read() == wanted:
                    found.append(int(os.path.basename(path)))
        except OSError:
            continue
    return found


def processes_of_uid(uid: int) -> int:
    """How many live processes run as `uid` (by real uid, what RLIMIT_NPROC counts)."""
    count = 0
    for path in _proc_entries():
        try:
            with open(f"{path}/status", encoding="ascii", errors="replace") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if fields.get("State", "").strip().startswith("Z"):
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += 1
    return count


def wait_until(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


# What grading and the bash tool need besides Python.
_TOOLS = ("bash", "sh", "git", "mktemp", "cat", "rm", "ls", "env")


@functools.cache
def _tools_without_python() -> str:
    """A directory (removed at exit) holding the usual tools but no `python`."""
    holder = tempfile.TemporaryDirectory(prefix="tools-without-python-")
    _tools_without_python.holder = holder  # kept alive, and removed, with the process
    os.chmod(holder.name, 0o755)
    for tool in _TOOLS:
        os.symlink(shutil.which(tool), os.path.join(holder.name, tool))
    return holder.name


class NoPythonSandbox(LocalSandbox):
    """A machine whose sandboxes lack the interpreter: PATH has the tools but no Python."""

    def _launch(self, argv, cwd, env):
        launch = super()._launch(argv, cwd, env)
        launch.env["PATH"] = _tools_without_python()
        return launch


class UidWithoutPythonSandbox(LocalSandbox):
    """The local backend as it was before it probed: as root, always a uid of its own, even
    where that uid cannot reach the framework's Python (the bug this stands in for)."""

    def _wants_own_uid(self) -> bool:
        return os.geteuid() == 0


NO_PYTHON = f"{__name__}:NoPythonSandbox"
UID_WITHOUT_PYTHON = f"{__name__}:UidWithoutPythonSandbox"


def no_python_backends() -> list:
    """Backends that cannot run the framework's Python, each where it can be simulated."""
    uid_blocked = os.geteuid() == 0 and sandbox_uid_blocker() is not None
    return [
        NO_PYTHON,
        pytest.param(
            UID_WITHOUT_PYTHON,
            marks=pytest.mark.skipif(not uid_blocked, reason="needs root and a framework Python that a sandbox uid cannot reach"),
        ),
    ]
