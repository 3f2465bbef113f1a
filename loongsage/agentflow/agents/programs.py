"""What every preset of an agent program (OpenCode, Codex CLI, Claude Code) checks of it: the
executable at a path the sandbox sees, the version it reports, and the address space its
runtime needs before it can start."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from loongsage.agentflow.agents.base import AgentTask

# Paths a sandbox does not see (bwrap mounts neither the homes nor the host's /tmp).
UNSEEN_PREFIXES = ("/root/", "/home/", "/tmp/")


def program_binary(agent: str, command: str, install: str) -> str:
    """The executable behind `command` (npm's launcher is a symlink to it), at a path a sandbox
    sees; refused naming `install` (how to install it) when missing or out of a sandbox's view."""
    found = shutil.which(command)
    if found is None:
        raise ValueError(f"agent {agent}: the `{command}` command is missing; {install}")
    binary = os.path.realpath(found)
    if binary.startswith(UNSEEN_PREFIXES):
        raise ValueError(
            f"agent {agent}: {binary} is under {Path(binary).parts[1]}/, which sandboxes do not see; "
            f"install it system-wide ({install} as root, into /usr or /usr/local)"
        )
    return binary


def program_version(agent: str, binary: str, env: dict[str, str]) -> str:
    """What `binary --version` prints, run with `env` (the preset's switches: no update check)."""
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"agent {agent}: {binary} --version failed: {exc}") from None
    version = done.stdout.strip()
    if done.returncode != 0 or not version:
        raise ValueError(f"agent {agent}: {binary} --version failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return version


def check_memory_floor(agent: str, task: AgentTask, floor_mb: int, why: str) -> None:
    """Refuse, before the program starts, a sandbox with less address space than its runtime needs."""
    if task.sandbox is not None and task.sandbox.limits.memory_mb < floor_mb:
        raise ValueError(
            f"agent {agent}: agent.sandbox_limits.memory_mb={task.sandbox.limits.memory_mb} is too little address "
            f"space: {why}; set it to {floor_mb} or more"
        )
