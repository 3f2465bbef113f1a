"""The engine requests each trajectory has in flight, so that the end of its episode can abort them.

A program killed mid-request (its timeout, its turn limit, a crash) leaves the router waiting on
a generation nobody will read; left alone it runs to its max_tokens, and then resumes if a weight
update aborted it. Meanwhile it holds an engine slot and, in a colocated run, keeps the engine
from releasing its memory for the trainer. `end` hands the controller those requests to abort and
refuses the trajectory any further engine call until its last handler has returned.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from loongsage.agentflow.router.errors import RouterError
from loongsage.inference.client import EngineClient


class InFlight:
    def __init__(self):
        self._lock = threading.Lock()
        self._handlers: dict[str, int] = {}  # trajectory -> requests being handled for it
        self._requests: dict[str, dict[str, EngineClient]] = {}  # trajectory -> rid -> its engine
        self._ended: set[str] = set()

    @contextmanager
    def handling(self, trajectory_id: str | None) -> Iterator[None]:
        """Around one request's handling; an ended trajectory forgets it has ended once the last
        of its handlers returns (an id is free again for a later episode)."""
        if trajectory_id is None:
            yield
            return
        with self._lock:
            self._handlers[trajectory_id] = self._handlers.get(trajectory_id, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._handlers[trajectory_id] -= 1
                if not self._handlers[trajectory_id]:
                    del self._handlers[trajectory_id]
                    self._ended.discard(trajectory_id)

    @contextmanager
    def request(self, trajectory_id: str | None, rid: str, engine: EngineClient) -> Iterator[None]:
        """Around one engine call; refused (409) once the trajectory's episode has ended."""
        if trajectory_id is None:
            yield
            return
        with self._lock:
            if trajectory_id in self._ended:
                raise RouterError(
                    409, f"trajectory {trajectory_id!r} has ended: its episode is over, nothing will read this reply"
                )
            self._requests.setdefault(trajectory_id, {})[rid] = engine
        try:
            yield
        finally:
            with self._lock:
                requests = self._requests[trajectory_id]
                del requests[rid]
                if not requests:
                    del self._requests[trajectory_id]

    def end(self, trajectory_id: str) -> list[tuple[str, EngineClient]]:
        """The trajectory's engine requests in flight, to abort; from now until its last handler
        returns it gets no engine call."""
        with self._lock:
            if trajectory_id in self._handlers:
                self._ended.add(trajectory_id)
            return list(self._requests.get(trajectory_id, {}).items())
