"""Helpers for the sandbox tests: which backends run here, and what is running on the host."""
from __future__ import annotations

import os
import time

import pytest

from loongsage.agentflow.sandbox import available_backends

RUNNABLE = ["bwrap", "local"]


def backend_params() -> list:
    """One pytest param per backend that runs commands, skipped where it does not work."""
    return [
        pytest.param(name, marks=pytest.mark.skipif(name not in available_backends(),
                                                     reason=f"sandbox backend {name!r} does not work here"))
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
