"""The `bwrap` backend (bubblewrap, Debian package `bubblewrap`): the host system read-only,
the tree read-write at /workspace, private /tmp, /dev/shm and /run, no network (unless
`limits.network`), its own pid namespace (so nothing a command starts outlives it), a new
session (no TIOCSTI into the caller's terminal), and a clean environment.

The host's homes (/root, /home) are not mounted, except the framework's own Python
installation, which is bound at its path so that `python3` and `pytest` work inside.
Other sandboxes' trees are hidden under a tmpfs.

Two ways to start it, because RLIMIT_NPROC does nothing for root:
- as root: bwrap runs privileged without a user namespace, and `setpriv` turns the command
  into the workspace's own unprivileged uid (all capabilities dropped, no_new_privs) before
  the limits are set: the kernel then counts this sandbox's processes only.
- otherwise: bwrap makes a user namespace; RLIMIT_NPROC is set inside it, where the kernel
  counts the namespace's processes only, not the user's others.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from loongsage.agentflow.sandbox.base import Launch, Sandbox, Snapshot, command_path
from loongsage.agentflow.sandbox.limits import SandboxError, SandboxLimits, limited_argv
from loongsage.agentflow.sandbox.workspace import sandboxes_dir

WORKDIR = "/workspace"
# Top-level host entries the sandbox does not see: made fresh, or private to the host's
# users (root, home).
_MADE_FRESH = frozenset({"proc", "dev", "tmp", "run"})
_NOT_FROM_HOST = _MADE_FRESH | {"root", "home", "lost+found"}


class BwrapSandbox(Sandbox):
    backend = "bwrap"
    hides_other_sandboxes = True
    read_only_system = True
    # RLIMIT_NPROC counts only the sandbox uid's (or user namespace's) processes, and the pid
    # namespace ends everything when the command exits.
    caps_processes = True
    kills_escaped_processes = True

    def __init__(
        self, snapshot: Snapshot | None, limits: SandboxLimits | None = None, *, attach: Mapping[str, Any] | None = None
    ) -> None:
        self._bwrap = _require("bwrap", "apt-get install bubblewrap")
        self._setpriv = _require("setpriv", "apt-get install util-linux") if os.geteuid() == 0 else None
        super().__init__(snapshot, limits, attach=attach)
        self.denies_network = not self.limits.network

    @property
    def workdir(self) -> str:
        return WORKDIR

    def _launch(self, argv: list[str], cwd: str, env: dict[str, str]) -> Launch:
        uid = self._workspace.uid
        clean_env = {"PATH": command_path(), "HOME": "/tmp", "LANG": "C.UTF-8"} | env
        args = [
            self._bwrap,
            *_namespaces(privileged=uid is not None, network=self.limits.network),
            "--die-with-parent",
            "--new-session",
            *host_mounts(),
            "--bind",
            str(self.root),
            WORKDIR,
            "--remount-ro",
            "/",
            "--chdir",
            cwd,
            "--clearenv",
        ]
        for key, value in clean_env.items():
            args += ["--setenv", key, value]
        if uid is not None:
            assert self._setpriv is not None
            args += [
                "--cap-add",
                "CAP_SETUID",
                "--cap-add",
                "CAP_SETGID",
                self._setpriv,
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ]
        args += limited_argv(argv, self.limits, self.limits.max_processes)
        return Launch(argv=args, env={"PATH": os.environ.get("PATH", os.defpath)})


def _require(program: str, install: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise SandboxError(f"the bwrap sandbox backend needs {program!r} on PATH (Debian: {install})")
    return path


def _namespaces(privileged: bool, network: bool) -> list[str]:
    if privileged:  # no user namespace: setpriv needs real uids to switch to
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        return namespaces if network else [*namespaces, "--unshare-net"]
    return ["--unshare-all", "--share-net"] if network else ["--unshare-all"]


@functools.cache
def host_mounts() -> tuple[str, ...]:
    """The bwrap arguments for the filesystem outside the tree (the same for every sandbox
    of this process)."""
    args: list[str] = []
    for entry in sorted(os.scandir("/"), key=lambda entry: entry.name):
        if entry.name in _NOT_FROM_HOST:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), entry.path]
        else:
            args += ["--ro-bind-try", entry.path, entry.path]  # -try: it may vanish meanwhile
    args += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--tmpfs",
        "/run",
    ]
    if _seen_from_host(str(sandboxes_dir())):
        args += ["--tmpfs", str(sandboxes_dir())]
    for prefix in sorted({sys.base_prefix, sys.prefix}):
        if not _seen_from_host(prefix):
            args += [*_traversable_parents(prefix), "--ro-bind", prefix, prefix]
    return tuple(args)


def _seen_from_host(path: str) -> bool:
    """Whether the host's `path` shows through one of the top-level binds."""
    parts = PurePosixPath(path).parts
    return len(parts) > 1 and parts[1] not in _NOT_FROM_HOST


def _traversable_parents(path: str) -> list[str]:
    """bwrap would create the missing parents of a bind with mode 0700, which the sandbox
    uid could not pass through."""
    args: list[str] = []
    for parent in reversed(PurePosixPath(path).parents[:-1]):
        if str(parent)[1:] not in _MADE_FRESH:
            args += ["--perms", "0755", "--dir", str(parent)]
    return args
