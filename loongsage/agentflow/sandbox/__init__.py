"""Sandboxes where agents run commands on a task's files: one interface, three backends.

    with create_sandbox({"pkg/mod.py": "..."}) as sb:   # or a directory to copy
        result = sb.exec("python -m pytest -q", timeout_s=120)
        sb.write_file("pkg/mod.py", fixed)
        patch = sb.diff()                                # `git apply`-able, vs the snapshot

Backends: `bwrap` (default where it works), `local` (cannot deny network access),
`apptainer` (needs `image=`), or an import path "pkg.module:Class" to a Sandbox subclass.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from loongsage.agentflow.sandbox.apptainer import ApptainerSandbox
from loongsage.agentflow.sandbox.base import Sandbox, Snapshot
from loongsage.agentflow.sandbox.bwrap import BwrapSandbox
from loongsage.agentflow.sandbox.limits import ExecResult, SandboxError, SandboxLimits
from loongsage.agentflow.sandbox.local import LocalSandbox
from loongsage.registry import Registry

__all__ = [
    "BACKENDS",
    "ExecResult",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "attach_sandbox",
    "available_backends",
    "backend_name",
    "create_sandbox",
]

log = logging.getLogger(__name__)

# An entry is a Sandbox subclass, constructed as `cls(snapshot, limits, **options)`, or to attach
# to another process's sandbox as `cls(None, limits, attach=handle, **options)`.
BACKENDS: Registry[type[Sandbox]] = Registry("sandbox backend")
BACKENDS.register("bwrap", BwrapSandbox)
BACKENDS.register("local", LocalSandbox)
BACKENDS.register("apptainer", ApptainerSandbox)


def create_sandbox(snapshot: Snapshot, backend: str = "auto", limits: SandboxLimits | None = None, **options: Any) -> Sandbox:
    """A sandbox whose tree holds `snapshot` ({relative path: content}, or a directory to
    copy). `options` go to the backend (apptainer: `image=`)."""
    backend = backend_name(backend)
    try:
        cls = BACKENDS.get(backend)
    except ValueError as exc:
        raise SandboxError(str(exc)) from None
    try:
        sandbox = cls(snapshot, limits, **options)
    except TypeError as exc:
        raise SandboxError(f"sandbox backend {backend!r}: {exc}") from exc
    if not isinstance(sandbox, Sandbox):
        sandbox_type = type(sandbox).__name__
        raise SandboxError(f"sandbox backend {backend!r} made a {sandbox_type}, not a Sandbox")
    return sandbox


def backend_name(backend: str) -> str:
    """The backend `backend` names here: "auto" becomes the one it picks on this machine."""
    if backend == "auto":
        return "bwrap" if "bwrap" in available_backends() else "local"
    return backend


def attach_sandbox(handle: Mapping[str, Any]) -> Sandbox:
    """Run commands in a sandbox another process owns, from its `Sandbox.handle()`. The handle
    cannot outlive the tree: `destroy()` on it stops only the commands it started."""
    try:
        cls = BACKENDS.get(handle["backend"])
        limits = SandboxLimits(**handle["limits"])
        options = dict(handle.get("options") or {})
    except (KeyError, TypeError, ValueError) as exc:
        raise SandboxError(f"bad sandbox handle ({exc}); make it with Sandbox.handle()") from None
    return cls(None, limits, attach=handle, **options)


def available_backends() -> list[str]:
    """The backends that work on this machine, probed once: bwrap and local run a command,
    apptainer answers `--version` (running it needs an image)."""
    return list(_probe_backends())


@functools.cache
def _probe_backends() -> tuple[str, ...]:
    working = [name for name in ("bwrap", "local") if _runs_a_command(BACKENDS[name])]
    apptainer = shutil.which("apptainer")
    if apptainer is not None and subprocess.run([apptainer, "--version"], capture_output=True).returncode == 0:
        working.append("apptainer")
    return tuple(working)


def _runs_a_command(cls: type[Sandbox]) -> bool:
    try:
        with cls({}, SandboxLimits(timeout_s=30, network=True)) as sandbox:
            result = sandbox.exec(["true"])
    except SandboxError as exc:
        log.info("sandbox backend %r unavailable: %s", cls.backend, exc)
        return False
    if result.exit_code != 0:
        log.info("sandbox backend %r unavailable: `true` exited %s: %s", cls.backend, result.exit_code, result.stderr.strip())
    return result.exit_code == 0
