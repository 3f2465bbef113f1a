"""The interface every sandbox backend implements, and everything they share: the tree made
from a snapshot, file access, the diff, running a command, and tearing it all down.

A backend only says how a command is launched (`_launch`) and what it promises:
`denies_network`, `hides_other_sandboxes` (another sandbox's tree can be neither read nor
written), `read_only_system` (nothing outside the tree and temp dirs can be written),
`caps_processes` (the kernel refuses forks past `limits.max_processes`: a fork bomb is capped,
not only stopped at the timeout), `kills_escaped_processes` (`destroy()` also ends what left
the command's process group, e.g. through setsid).
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import subprocess
import sys
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from loongsage.agentflow.sandbox import tree_files
from loongsage.agentflow.sandbox.limits import ExecResult, SandboxError, SandboxLimits
from loongsage.agentflow.sandbox.process import kill_group, run_captured
from loongsage.agentflow.sandbox.snapshot_git import GitSnapshot
from loongsage.agentflow.sandbox.workspace import (
    Workspace,
    claim_workspace,
    fill_tree,
    hand_over,
    kill_sandbox_processes,
    release_workspace,
)

Snapshot = Mapping[str, str] | str | Path
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def command_path() -> str:
    """PATH inside a sandbox: the framework's own Python first (so its pytest is there),
    then the usual system directories."""
    return f"{os.path.dirname(sys.executable)}:{_SYSTEM_PATH}"


@dataclass
class Launch:
    """How to start one command: the full argv, and extra `subprocess.Popen` options."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    popen_options: dict[str, object] = field(default_factory=dict)


class Sandbox(ABC):
    backend: ClassVar[str]
    # Whether commands run as the workspace's own uid when the framework is root.
    uses_own_uid: ClassVar[bool] = True
    # What the backend promises; nothing unless it says so.
    denies_network: bool = False
    hides_other_sandboxes: bool = False
    read_only_system: bool = False
    caps_processes: bool = False
    kills_escaped_processes: bool = False

    def __init__(
        self, snapshot: Snapshot | None, limits: SandboxLimits | None = None, *, attach: Mapping[str, Any] | None = None
    ) -> None:
        """A new sandbox holding `snapshot`; or, with `attach` (another sandbox's `handle()`),
        a handle on that existing one (see `attach_sandbox`)."""
        self.limits = limits if limits is not None else SandboxLimits()
        if not isinstance(self.limits, SandboxLimits):
            raise SandboxError(f"limits must be a SandboxLimits, got {type(self.limits).__name__}")
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._diff_lock = threading.Lock()
        if attach is not None:
            self._attach(attach)
            return
        workspace = claim_workspace(own_uid=self._wants_own_uid())
        # Runs on destroy(), on garbage collection, or at interpreter exit, whichever is first.
        self._teardown = weakref.finalize(self, _teardown, workspace, self._running, self._lock)
        try:
            fill_tree(workspace.tree, snapshot)
            self._snapshot = GitSnapshot.record(workspace.tree, workspace.base / "snapshot.git")
            hand_over(workspace)
        except BaseException:
            self._teardown()
            raise
        self._workspace = workspace
        self.root: Path = workspace.tree

    def _wants_own_uid(self) -> bool:
        """Whether this new sandbox should get a uid of its own (granted only to root)."""
        return self.uses_own_uid

    def handle(self) -> dict[str, Any]:
        """What another process (a black-box agent's tool runner) needs to run commands in this
        sandbox, as JSON-able data: pass it to `attach_sandbox`. This object keeps owning the tree."""
        self._check_alive()
        workspace = self._workspace
        return {
            "backend": self.backend,
            "base": str(workspace.base),
            "tree": str(workspace.tree),
            "home": str(workspace.home),
            "uid": workspace.uid,
            "snapshot_commit": self._snapshot.commit,
            "limits": dataclasses.asdict(self.limits),
            "options": self._handle_options(),
        }

    def _handle_options(self) -> dict[str, Any]:
        """Constructor keyword arguments an attached handle needs (apptainer: its image)."""
        return {}

    def _attach(self, handle: Mapping[str, Any]) -> None:
        try:
            workspace = Workspace(
                base=Path(handle["base"]), tree=Path(handle["tree"]), home=Path(handle["home"]), uid=handle["uid"]
            )
            commit = handle["snapshot_commit"]
        except (KeyError, TypeError) as exc:
            raise SandboxError(f"sandbox handle lacks {exc}; make it with Sandbox.handle()") from None
        if not workspace.tree.is_dir():
            raise SandboxError(f"sandbox handle: {workspace.tree} no longer exists (destroyed by its owner?)")
        # Only the commands this handle started are its to kill: the owner keeps the tree.
        self._teardown = weakref.finalize(self, _stop_commands, self._running, self._lock)
        self._snapshot = GitSnapshot(workspace.base / "snapshot.git", workspace.tree, commit)
        self._workspace = workspace
        self.root = workspace.tree

    @property
    @abstractmethod
    def workdir(self) -> str:
        """The path commands see as their working directory."""

    @abstractmethod
    def _launch(self, argv: list[str], cwd: str, env: dict[str, str]) -> Launch:
        """How to run `argv` in `cwd` (a path inside `workdir`) with `env` added to the
        backend's clean environment."""

    def exec(
        self,
        command: str | list[str],
        timeout_s: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        """Run `command` (a string runs under `bash -c`) in the tree. Everything it starts is
        killed when it exits or times out: background jobs do not outlive the call."""
        self._check_alive()
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if not argv or not all(isinstance(arg, str) for arg in argv):
            raise SandboxError(f"command must be a string or a non-empty list of strings, got {command!r}")
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        if timeout <= 0:
            raise SandboxError(f"timeout_s must be positive, got {timeout_s!r}")
        launch = self._launch(argv, self._command_cwd(cwd), _check_env(env or {}))
        return run_captured(
            launch.argv,
            cwd=launch.cwd,
            env=launch.env,
            stdin=stdin,
            timeout_s=timeout,
            max_output_bytes=self.limits.max_output_bytes,
            popen_options=launch.popen_options,
            on_start=self._started,
            on_finish=self._finished,
        )

    def read_file(self, path: str) -> str:
        self._check_alive()
        return tree_files.read_text(self.root, path)

    def write_file(self, path: str, content: str) -> None:
        self._check_alive()
        tree_files.write_text(self.root, path, content, owner=self._workspace.uid)

    def diff(self) -> str:
        """`git diff` (a/ b/ prefixes) of the tree against the snapshot, new and deleted
        files included; `git apply` accepts it. Unaffected by the agent's own git use."""
        self._check_alive()
        with self._diff_lock:  # one private index: one `git add` at a time
            return self._snapshot.diff()

    def destroy(self) -> None:
        """Kill everything still running and remove the tree. Safe to call again."""
        self._teardown()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.destroy()

    @property
    def uid(self) -> int | None:
        """The unprivileged uid this sandbox's commands run as, or None for the framework's own."""
        return self._workspace.uid

    @property
    def alive(self) -> bool:
        return self._teardown.alive

    def _check_alive(self) -> None:
        if not self._teardown.alive:
            raise SandboxError(f"{self.backend} sandbox at {self.root} was destroyed")

    def _command_cwd(self, cwd: str | None) -> str:
        """`cwd` (relative to `workdir`, or absolute inside it) as a path inside `workdir`;
        it must be an existing directory of the tree."""
        if cwd is None:
            return self.workdir
        inside = posixpath.normpath(posixpath.join(self.workdir, cwd))
        relative = posixpath.relpath(inside, self.workdir)
        if relative == ".":
            return self.workdir
        host = self.root / relative
        if relative.startswith("..") or not host.is_dir() or not host.resolve().is_relative_to(self.root.resolve()):
            raise SandboxError(f"cwd {cwd!r} is not a directory inside the sandbox's working tree")
        return inside

    def _started(self, proc: subprocess.Popen) -> None:
        with self._lock:
            alive = self._teardown.alive
            if alive:
                self._running.add(proc)
        if not alive:  # destroyed while this command was starting
            kill_group(proc)

    def _finished(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._running.discard(proc)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.root} {'alive' if self.alive else 'destroyed'}>"


def _check_env(env: Mapping[str, str]) -> dict[str, str]:
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise SandboxError(f"env name {key!r} is not a valid environment variable name")
        if not isinstance(value, str) or "\0" in value:
            raise SandboxError(f"env value for {key!r} must be a string without NUL bytes")
    return dict(env)


def _stop_commands(running: set[subprocess.Popen], lock: threading.Lock) -> None:
    with lock:  # under the lock: a command being reaped has already left `running`
        for proc in running:
            kill_group(proc)


def _teardown(workspace: Workspace, running: set[subprocess.Popen], lock: threading.Lock) -> None:
    """Kill the sandbox's processes (tracked groups, then every process of its uid), then
    remove its directory."""
    _stop_commands(running, lock)
    if workspace.uid is not None:
        kill_sandbox_processes(workspace.uid)
    release_workspace(workspace)
