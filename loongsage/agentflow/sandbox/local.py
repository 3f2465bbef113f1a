"""The `local` backend: a temp dir and a subprocess with resource limits, no namespaces.

Running as root, commands run as the workspace's own unprivileged uid: the system, the
host's home and other sandboxes' trees (mode 0700, other uids) are not writable, the
process limit counts this sandbox alone, and destroy() ends every process of that uid.
That needs the uid to reach the framework's Python (graders and agents run `python`); a
pyenv or venv under a root-only home is out of its reach. That is probed once per process
(uid_reach.py): where the uid cannot run it, commands run as the framework's own user, a
warning says why once, and the sandbox promises no more than it then keeps.

LIMITATION: `local` cannot deny network access. `limits.network=False` is not enforced
(a warning says so once per process); use `bwrap` where that matters. As the framework's
user, commands can write wherever it can; not root, the process limit is the user's current
process count plus `max_processes`; as root there is no process limit (the kernel ignores
RLIMIT_NPROC for root) and a fork bomb is stopped only by the timeout.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from loongsage.agentflow.sandbox.base import Launch, Sandbox, Snapshot, command_path
from loongsage.agentflow.sandbox.limits import SandboxLimits, limited_argv
from loongsage.agentflow.sandbox.uid_reach import sandbox_uid_blocker

log = logging.getLogger(__name__)
_warned_about_network = False
_warned_about_own_user = False


class LocalSandbox(Sandbox):
    backend = "local"
    denies_network = False

    def __init__(
        self, snapshot: Snapshot | None, limits: SandboxLimits | None = None, *, attach: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(snapshot, limits, attach=attach)
        own_uid = self._workspace.uid is not None
        self.hides_other_sandboxes = own_uid
        self.read_only_system = own_uid
        self.kills_escaped_processes = own_uid
        self.caps_processes = own_uid or os.geteuid() != 0
        if not self.limits.network:
            _warn_network_not_denied()

    def _wants_own_uid(self) -> bool:
        if os.geteuid() != 0:
            return False
        blocker = sandbox_uid_blocker()
        if blocker is not None:
            _warn_running_as_own_user(blocker)
        return blocker is None

    @property
    def workdir(self) -> str:
        return str(self.root)

    def _launch(self, argv: list[str], cwd: str, env: dict[str, str]) -> Launch:
        uid = self._workspace.uid
        options: dict[str, object] = {}
        if uid is not None:
            max_processes: int | None = self.limits.max_processes
            options = {"user": uid, "group": uid, "extra_groups": []}
        elif os.geteuid() == 0:
            max_processes = None  # the kernel does not enforce RLIMIT_NPROC for root
        else:
            max_processes = _tasks_of_user(os.getuid()) + self.limits.max_processes
        clean_env = {"PATH": command_path(), "HOME": str(self._workspace.home), "LANG": "C.UTF-8"}
        return Launch(argv=limited_argv(argv, self.limits, max_processes), env=clean_env | env, cwd=cwd, popen_options=options)


def _warn_network_not_denied() -> None:
    global _warned_about_network
    if not _warned_about_network:
        _warned_about_network = True
        log.warning(
            "the local sandbox backend cannot deny network access: limits.network=False "
            "is not enforced; use the bwrap backend (apt-get install bubblewrap)"
        )


def _warn_running_as_own_user(reason: str) -> None:
    global _warned_about_own_user
    if not _warned_about_own_user:
        _warned_about_own_user = True
        log.warning(
            "the local sandbox backend runs commands as this process's user (uid %d), without a uid of "
            "their own, because %s. Sandboxes then neither hide each other's trees nor keep the system "
            "read-only, and nothing caps their processes. For that isolation install bubblewrap "
            "(apt-get install bubblewrap), or install Python where other users can reach it.",
            os.geteuid(),
            reason,
        )


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
