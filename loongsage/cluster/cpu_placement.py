"""Pinning a process to the CPU cores its placement gives it (config/placement.py: `split_cores`)."""

from __future__ import annotations

import os
from pathlib import Path


def pin_this_process(cores: list[int]) -> None:
    """Every thread of this process, and every thread it starts later, runs on `cores` only."""
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cores)
        except (ProcessLookupError, PermissionError):  # a thread that just ended, or not ours
            pass
    os.sched_setaffinity(0, cores)
