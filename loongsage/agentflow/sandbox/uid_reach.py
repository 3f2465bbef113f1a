"""Whether a sandbox's own uid can run the framework's Python, decided once per process.

Running as root, the `local` backend gives every sandbox an unprivileged uid of its own.
That uid must reach the interpreter the run uses, with its pytest: graders and agents run
`python` in the sandbox. A pyenv or venv under a root-only home (/root is mode 0700) is out
of its reach; every `python` is then "command not found" and every grading scores 0. bwrap
binds the installation in; `local` cannot, so it asks this probe first and, when the uid
cannot run it, runs commands as the framework's own user instead.
"""

from __future__ import annotations

import functools
import os
import stat
import subprocess
import sys
from pathlib import Path

from loongsage.agentflow.sandbox.base import command_path
from loongsage.agentflow.sandbox.workspace import claim_uid, kill_sandbox_processes, sandboxes_dir

# The sandbox's own view: `python` looked up on its PATH must be this installation (the same
# sys.prefix, not another Python further down PATH) and must import pytest.
_PROBE = 'python -c "import sys, pytest; print(sys.prefix)"'
_PROBE_TIMEOUT_S = 60.0
_MAX_OUTPUT_CHARS = 300


@functools.cache
def sandbox_uid_blocker() -> str | None:
    """None when a sandbox uid can run the framework's Python; otherwise why not. Probed
    for real once per process (a fraction of a second), only ever called as root."""
    return uid_blocker(command_path())


def uid_blocker(path: str) -> str | None:
    """None when a fresh, unused sandbox uid, with `path` as its PATH, runs the framework's
    Python and imports pytest; otherwise the reason, naming the directory it cannot pass
    where there is one."""
    uid, base = claim_uid(sandboxes_dir())
    try:
        done = subprocess.run(
            ["bash", "-c", _PROBE],
            user=uid,
            group=uid,
            extra_groups=[],
            cwd="/",
            env={"PATH": path, "HOME": "/nonexistent", "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"a sandbox uid's `{_PROBE}` did not finish within {_PROBE_TIMEOUT_S:g} s"
    finally:
        kill_sandbox_processes(uid)
        base.rmdir()
    found = done.stdout.strip()
    if done.returncode == 0 and found == sys.prefix:
        return None
    if done.returncode == 0:
        seen = f"`python` there is another installation ({found}), not the framework's ({sys.prefix})"
    else:
        seen = f"`{_PROBE}` exited {done.returncode}: {_tail(done.stderr or done.stdout)}"
    closed = closed_directory(sys.executable)
    where = f"; {closed}" if closed else ""
    return f"a sandbox's own uid cannot run the framework's Python {sys.executable}{where}; in the sandbox {seen}"


def closed_directory(path: str) -> str | None:
    """The first directory on the way to `path` (and to what its symlinks point at) that
    other users cannot pass, described, or None."""
    for candidate in dict.fromkeys([path, os.path.realpath(path)]):
        for directory in reversed(Path(candidate).parents):
            try:
                mode = os.stat(directory).st_mode
            except OSError:
                continue
            if not mode & stat.S_IXOTH:
                return f"{directory} is mode {stat.S_IMODE(mode):04o}, not searchable by other users"
    return None


def _tail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_OUTPUT_CHARS else "..." + text[-_MAX_OUTPUT_CHARS:]
