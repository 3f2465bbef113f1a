"""Which engine serves a request, and trying another when it fails.

Affinity first: every request with the same key (a trajectory, a prompt group) goes to the
engine that served the key before, so each turn's prompt continues a prefix that engine has
cached. A new key goes to the engine with the fewest requests outstanding. An engine that
drops the connection, or answers with weights older than the published ones, is taken out of
rotation (see EngineRoster) and the request is sent again elsewhere: a /generate call has no
effect until it answers, so sending it again neither loses nor duplicates anything. With no
engine usable the request waits for one (a restart, a weight push) until its deadline.

Used from one event loop only (its EngineClients' async connections belong to that loop), so
the counters here need no lock; what several loops share lives in the EngineRoster.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable

from loongsage.inference.client import EngineClient, EngineError
from loongsage.inference.engine_roster import EngineRoster
from loongsage.inference.resumable import UNVERSIONED, version_number

MAX_REMEMBERED_KEYS = 100_000  # past this, the least recently used assignment is forgotten
WAIT_STEP_S = 0.2  # between looks for a usable engine while none is
RETRIED_STATUSES = (None, 503)  # no answer at all, or "not now" (restarting, weights released)


class NoEngineAvailable(RuntimeError):
    pass


class EnginePool:
    def __init__(self, roster: EngineRoster | list[str] | tuple[str, ...], timeout: float = 600.0):
        self.roster = roster if isinstance(roster, EngineRoster) else EngineRoster(roster)
        self.timeout = timeout
        self.clients = [EngineClient(url, timeout=timeout) for url in self.roster.urls]
        self.in_flight = [0] * len(self.clients)
        self.keys_held = [0] * len(self.clients)  # keys currently assigned to each engine
        self._assigned: OrderedDict[Hashable, int] = OrderedDict()

    async def call(self, key: Hashable | None, request: Callable[[EngineClient], Awaitable[dict]]) -> dict:
        """`request(client)` on the engine for `key` (None: no affinity), sent again on another
        engine until one answers with current weights. NoEngineAvailable after the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            index = await self._usable_engine(key, deadline)
            published = self.roster.published()
            self.in_flight[index] += 1
            try:
                response = await request(self.clients[index])
            except EngineError as exc:
                if exc.status not in RETRIED_STATUSES:
                    raise
                self._failed(index, key, f"{type(exc).__name__}: {exc.server_message}")
                continue
            finally:
                self.in_flight[index] -= 1
            version = _response_version(response)
            if version != UNVERSIONED and version < published:
                self.roster.mark_lagging(index, version)
                self.forget(key)
                continue
            return response

    def engine_for(self, key: Hashable | None) -> EngineClient:
        """The client `key` is assigned to (for calls outside `call`, e.g. reading its limits)."""
        return self.clients[self._pick(key)]

    def forget(self, key: Hashable | None) -> None:
        index = self._assigned.pop(key, None) if key is not None else None
        if index is not None:
            self.keys_held[index] -= 1

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()
            client.close()

    def _failed(self, index: int, key: Hashable | None, reason: str) -> None:
        self.roster.mark_down(index, reason)
        self.forget(key)

    async def _usable_engine(self, key: Hashable | None, deadline: float) -> int:
        while True:
            await self._probe_down_engines()
            if any(self.roster.usable(i) for i in range(len(self.clients))):
                return self._pick(key)
            if time.monotonic() > deadline:
                raise NoEngineAvailable(
                    f"no engine could take the request within {self.timeout:.0f} s (rollout.request_timeout_s): "
                    f"{', '.join(self.roster.urls)} are down or lack the published weights"
                )
            await asyncio.sleep(WAIT_STEP_S)

    async def _probe_down_engines(self) -> None:
        for index in self.roster.due_for_probe():
            client = self.clients[index]
            try:
                if await asyncio.to_thread(client.health):
                    self.roster.mark_up(index, version_number(await asyncio.to_thread(client.get_weight_version)))
            except EngineError:
                pass  # still coming up: probed again later

    def _pick(self, key: Hashable | None) -> int:
        if key is not None and key in self._assigned:
            index = self._assigned[key]
            if self.roster.usable(index):
                self._assigned.move_to_end(key)
                return index
            self.forget(key)
        usable = [i for i in range(len(self.clients)) if self.roster.usable(i)] or list(range(len(self.clients)))
        index = min(usable, key=lambda i: (self.in_flight[i], self.keys_held[i], i))
        if key is not None:
            self._assigned[key] = index
            self.keys_held[index] += 1
            if len(self._assigned) > MAX_REMEMBERED_KEYS:
                self.forget(next(iter(self._assigned)))
        return index


def _response_version(response) -> int:
    meta = response.get("meta_info") if isinstance(response, dict) else None
    return version_number(meta.get("weight_version")) if isinstance(meta, dict) else UNVERSIONED
