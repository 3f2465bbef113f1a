"""The `local` backend: a temp dir and a subprocess with resource limits, no namespaces.

Running as root, commands run as the workspace's own unprivileged uid: the system, the
host's home and other sandboxes' trees (mode 0700, other uids) are not writable, and the
process limit counts this sandbox alone. Tools under a root-only directory (a pyenv in
/root) are then out of reach; bwrap binds the framework's Python in, local cannot.

LIMITATION: `local` cannot deny network access. `limits.network=False` is not enforced
(a warning says so once per process); use `bwrap` where that matters. Not root, commands
run as the framework's user: they can write wherever it can, and the process limit is
the user's current process count plus `max_processes`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import logging
import os

from loongsage.agentflow.sandbox.base import Launch, Sandbox, Snapshot, command_path
from loongsage.agentflow.sandbox.limits import SandboxLimits, limited_argv

log = logging.getLogger(__name__)
_warned_about_network = False


class LocalSandbox(Sandbox):
    backend = "local"
    denies_network = False

    def __init__(self, snapshot: Snapshot | None, limits: SandboxLimits | None = None, *,
                 attach: Mapping[str, Any] | None = None) -> None:
        super().__init__(snapshot, limits, attach=attach)
        own_uid = self._workspace.uid is not None
        self.hides_other_sandboxes = own_uid
        self.read_only_system = own_uid
        if not self.limits.network:
            _warn_network_not_denied()

    @property
    def workdir(self) -> str:
        return str(self.root)

    def _launch(self, argv: list[str], cwd: str, env: dict[str, str]) -> Launch:
        uid = self._workspace.uid
        if uid is None:
            max_processes = _tasks_of_user(os.getuid()) + self.limits.max_processes
            options: dict[str, object] = {}
        else:
            max_processes = self.limits.max_processes
            options = {"user": uid, "group": uid, "extra_groups": []}
        clean_env = {"PATH": command_path(), "HOME": str(self._workspace.home), "LANG": "C.UTF-8"}
        return Launch(argv=limited_argv(argv, self.limits, max_processes), env=clean_env | env,
                      cwd=cwd, popen_options=options)


def _warn_network_not_denied() -> None:
    global _warned_about_network
    if not _warned_about_network:
        _warned_about_network = True
        log.warning("the local sandbox backend cannot deny network access: limits.network=False "
                    "is not enforced; use the bwrap backend (apt-get install bubblewrap)")


def _tasks_of_user(uid: int) -> int:
    """Processes and threads of `uid` now: what RLIMIT_NPROC counts against."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue  # exited meanwhile
        if int(fields.get("Uid", "-1 ").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count
