"""An httpx client that is never reused once a request on it may have broken a connection.

After a transport error, or a 5xx (after which many servers close the connection: uvicorn does
when the app raised), a pooled keep-alive connection may be dead while it still looks idle,
and the next request to take it, perhaps another trajectory's, fails for nothing it did. So
such a request retires its whole client: later requests get a fresh one, and the retired one is
closed once the requests still running on it (on other connections, unharmed) are done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

Client = TypeVar("Client")


@dataclass
class Lease(Generic[Client]):
    client: Client
    in_flight: int = 0
    retired: bool = False


class RetiringPool(Generic[Client]):
    """`checkout()` a client for one request; `checkin(lease, broken)` returns the client to close
    (with `close()` or `aclose()`, by the caller) when a retired one has nothing left running."""

    def __init__(self, make: Callable[[], Client]):
        self._make = make
        self._current: Lease[Client] | None = None
        self._lock = threading.Lock()  # the sync client is shared between threads

    def checkout(self) -> Lease[Client]:
        with self._lock:
            if self._current is None:
                self._current = Lease(self._make())
            self._current.in_flight += 1
            return self._current

    def checkin(self, lease: Lease[Client], broken: bool) -> Client | None:
        with self._lock:
            lease.in_flight -= 1
            if broken:
                self._retire(lease)
            return lease.client if lease.retired and lease.in_flight == 0 else None

    def close(self) -> Client | None:
        """Retires the current client; returns it when nothing runs on it (else its last request
        closes it)."""
        with self._lock:
            lease = self._current
            if lease is None:
                return None
            self._retire(lease)
            return lease.client if lease.in_flight == 0 else None

    def _retire(self, lease: Lease[Client]) -> None:
        lease.retired = True
        if self._current is lease:
            self._current = None
