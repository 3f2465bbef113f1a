"""Which engine serves a trajectory: the same one for all its turns, so each turn's prompt
continues a prefix that engine has cached; a new trajectory goes to the least-loaded engine."""

from __future__ import annotations

from collections import OrderedDict
from contextlib import asynccontextmanager

from loongsage.inference.client import EngineClient

MAX_REMEMBERED_TRAJECTORIES = 100_000  # past this, the least recently used assignment is forgotten


class EnginePool:
    """Used from the router's event loop only, so the counters need no lock."""

    def __init__(self, urls: list[str] | tuple[str, ...], timeout: float = 600.0):
        if not urls:
            raise ValueError("router engine_urls is empty: give at least one engine base URL")
        self.clients = [EngineClient(url, timeout=timeout) for url in urls]
        self.in_flight = [0] * len(urls)
        self.trajectories = [0] * len(urls)  # trajectories assigned to each engine
        self._assigned: OrderedDict[str, int] = OrderedDict()

    @asynccontextmanager
    async def engine_for(self, trajectory_id: str | None):
        """The engine client for `trajectory_id` (None: an anonymous request), counted as busy
        while the caller holds it."""
        index = self._pick(trajectory_id)
        self.in_flight[index] += 1
        try:
            yield self.clients[index]
        finally:
            self.in_flight[index] -= 1

    def forget(self, trajectory_id: str) -> None:
        index = self._assigned.pop(trajectory_id, None)
        if index is not None:
            self.trajectories[index] -= 1

    def _pick(self, trajectory_id: str | None) -> int:
        if trajectory_id is not None and trajectory_id in self._assigned:
            self._assigned.move_to_end(trajectory_id)
            return self._assigned[trajectory_id]
        index = min(range(len(self.clients)), key=lambda i: (self.in_flight[i], self.trajectories[i], i))
        if trajectory_id is not None:
            self._assigned[trajectory_id] = index
            self.trajectories[index] += 1
            if len(self._assigned) > MAX_REMEMBERED_TRAJECTORIES:
                self.forget(next(iter(self._assigned)))
        return index

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()
            client.close()
