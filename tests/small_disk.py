"""A size-limited tmpfs: a real full disk for the tests of what a run does when it fills."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def mount_small_disk(mount: Path, size: str) -> None:
    """Mount a tmpfs of `size` (mount's syntax: 1300k) at `mount`; skip where mounting needs a
    root this process is not (CI runs as root)."""
    mount.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.strip()}")


def resize_small_disk(mount: Path, size_bytes: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_bytes}", str(mount)], check=True)


def unmount_small_disk(mount: Path) -> None:
    subprocess.run(["umount", "-l", str(mount)], check=True)
