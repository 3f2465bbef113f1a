"""The sandboxes of agent episodes in flight, so that a stop can end them all.

A stop destroys them rather than waiting: a black-box program whose endpoint went away retries
it for a minute or more (OpenCode: ~65-75 s). An episode still starting when the stop comes
(its sandbox made, not yet registered) would escape a snapshot of the live set, so once closed
the registry destroys what it is handed instead of admitting it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from loongsage.agentflow.sandbox import Sandbox, SandboxError


class LiveSandboxes:
    def __init__(self):
        self._lock = threading.Lock()
        self._live: set[Sandbox] = set()
        self._closed = False

    @contextmanager
    def holding(self, sandbox: Sandbox) -> Iterator[Sandbox]:
        """`sandbox`, known as live while the block runs; destroyed at once (SandboxError) when
        the registry is already closed."""
        with self._lock:
            admitted = not self._closed
            if admitted:
                self._live.add(sandbox)
        if not admitted:
            sandbox.destroy()
            raise SandboxError("the rollout is stopping: no episode starts now")
        try:
            yield sandbox
        finally:
            with self._lock:
                self._live.discard(sandbox)

    def close(self) -> None:
        """Destroy every live sandbox (everything in it killed) and admit no more."""
        with self._lock:
            self._closed = True
            live = list(self._live)
        for sandbox in live:
            sandbox.destroy()
