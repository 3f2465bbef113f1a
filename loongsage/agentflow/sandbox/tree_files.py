"""Reading and writing files of a sandbox's tree from the host, safely.

The framework may run as root while the tree is the agent's: a symlink planted there
(`notes.txt -> /etc/shadow`) must not turn a read or write into one outside the tree. Paths
are resolved once (in-tree symlinks are fine), then opened component by component with
O_NOFOLLOW, so a link swapped in meanwhile fails instead of being followed.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from loongsage.agentflow.sandbox.limits import SandboxError

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under the file's name must not hang the framework.
_OPEN_FILE = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def check_relative_path(rel: str) -> tuple[str, ...]:
    """The components of `rel`, which must stay inside the tree by its spelling alone."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise SandboxError(f"sandbox path {rel!r} must be a non-empty string")
    path = PurePosixPath(rel)
    if path.is_absolute():
        raise SandboxError(f"sandbox path {rel!r} must be relative to the working tree")
    if ".." in path.parts:
        raise SandboxError(f"sandbox path {rel!r} must not contain '..'")
    if not path.parts:
        raise SandboxError(f"sandbox path {rel!r} names the working tree itself, not a file")
    return path.parts


def read_text(tree: Path, rel: str) -> str:
    parts = _resolve_inside(tree, rel)
    parent = _open_dirs(tree, rel, parts[:-1], create_owner=None, create=False)
    try:
        fd = _open_file(parent, rel, parts[-1], os.O_RDONLY)
    finally:
        os.close(parent)
    with os.fdopen(fd, "rb") as file:
        return file.read().decode("utf-8", errors="replace")


def write_text(tree: Path, rel: str, content: str, owner: int | None) -> None:
    """Write `content` (utf-8), creating missing directories; new entries get `owner`."""
    if not isinstance(content, str):
        raise SandboxError(f"content for sandbox path {rel!r} must be str, got {type(content).__name__}")
    parts = _resolve_inside(tree, rel)
    parent = _open_dirs(tree, rel, parts[:-1], create_owner=owner, create=True)
    try:
        fd = _open_file(parent, rel, parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    finally:
        os.close(parent)
    if owner is not None:
        os.fchown(fd, owner, owner)
    with os.fdopen(fd, "wb") as file:
        file.write(content.encode("utf-8"))


def _resolve_inside(tree: Path, rel: str) -> tuple[str, ...]:
    """`rel` with in-tree symlinks resolved, as components under the tree."""
    parts = check_relative_path(rel)
    real_tree = os.path.realpath(tree)
    real = os.path.realpath(os.path.join(real_tree, *parts))
    if not real.startswith(real_tree + os.sep):
        raise SandboxError(f"sandbox path {rel!r} leads outside the working tree (through a symlink)")
    return Path(real).relative_to(real_tree).parts


def _open_dirs(tree: Path, rel: str, dirs: tuple[str, ...], create_owner: int | None, create: bool) -> int:
    """An fd of the directory `tree/dirs...`, never following a symlink on the way."""
    fd = os.open(tree, _OPEN_DIR)
    try:
        for name in dirs:
            child = _enter(fd, name, rel, create_owner, create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _enter(fd: int, name: str, rel: str, create_owner: int | None, create: bool) -> int:
    try:
        return os.open(name, _OPEN_DIR, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise SandboxError(f"no file {rel!r} in the sandbox") from None
    except OSError as exc:
        raise _escape_error(rel, name, exc) from exc
    os.mkdir(name, 0o755, dir_fd=fd)
    child = os.open(name, _OPEN_DIR, dir_fd=fd)
    if create_owner is not None:
        os.fchown(child, create_owner, create_owner)
    return child


def _open_file(parent: int, rel: str, name: str, flags: int) -> int:
    try:
        fd = os.open(name, flags | _OPEN_FILE, 0o644, dir_fd=parent)
    except FileNotFoundError:
        raise SandboxError(f"no file {rel!r} in the sandbox") from None
    except OSError as exc:
        raise _escape_error(rel, name, exc) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SandboxError(f"sandbox path {rel!r} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def _escape_error(rel: str, name: str, exc: OSError) -> SandboxError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return SandboxError(f"sandbox path {rel!r}: {name!r} is a symlink or not a directory")
    return SandboxError(f"sandbox path {rel!r}: {exc.strerror}")
