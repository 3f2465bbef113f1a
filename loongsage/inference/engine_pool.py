"""Which engine serves a request, and trying another when it fails.

Affinity first: every request with the same key (a trajectory, a prompt group) goes to the
engine that served the key before, so each turn's prompt continues a prefix that engine has
cached. A new key goes to the engine with the fewest requests outstanding. An engine that
drops the connection, or answers with weights older than the published ones, is taken out of
rotation (see EngineRoster) and the request is sent again elsewhere: a /generate call has no
effect until it answers, so sending it again neither loses nor duplicates anything. With no
engine usable the request waits for one (a restart, a weight push) until its deadline.

Down engines are probed (/health, then the weight version from /model_info) in tasks of their
own with a short timeout: a request never waits on a probe, and an engine whose host went
silent costs the probe its timeout, not every request its own.

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
PROBE_TIMEOUT_S = 5.0  # an engine that takes longer to say it is healthy is not back yet
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
        self._probers = [EngineClient(url, timeout=min(PROBE_TIMEOUT_S, timeout)) for url in self.roster.urls]
        self._probes: set[asyncio.Task] = set()

    async def call(self, key: Hashable | None, request: Callable[[EngineClient], Awaitable[dict]]) -> dict:
        """`request(client)` on the engine for `key` (None: no affinity), sent again on another
        engine until one answers with current weights. Errors other than a dropped connection or
        a 503 are raised as they come; NoEngineAvailable once the timeout has passed with no
        engine to try; after a failure past the timeout, that failure."""
        deadline = time.monotonic() + self.timeout
        while True:
            index = await self._usable_engine(key, deadline)
            published = self.roster.published()
            self.in_flight[index] += 1
            try:
                response = await request(self.clients[index])
            except EngineError as exc:
                if exc.status not in RETRIED_STATUSES or self.roster.closed:
                    raise
                self._failed(index, key, f"{type(exc).__name__}: {exc}")
                if time.monotonic() >= deadline:
                    raise
                continue
            finally:
                self.in_flight[index] -= 1
            version = _response_version(response)
            if version != UNVERSIONED and version < published:
                self.roster.mark_lagging(index, version)
                self.forget(key)
                if time.monotonic() >= deadline:
                    raise NoEngineAvailable(
                        f"{self.roster.urls[index]} answered with weights of version {version}, older than the "
                        f"published {published}, and the request timeout of {self.timeout:g} s has passed"
                    )
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
        for task in list(self._probes):
            task.cancel()
        for client in self.clients + self._probers:
            await client.aclose()
            client.close()

    def _failed(self, index: int, key: Hashable | None, reason: str) -> None:
        self.roster.mark_down(index, reason)
        self.forget(key)

    async def _usable_engine(self, key: Hashable | None, deadline: float) -> int:
        while True:
            if self.roster.closed:
                # The run is stopping its engines: waiting for one to come back would hold the
                # shutdown for the whole request timeout.
                raise NoEngineAvailable("the engines were stopped (the run is shutting down)")
            self._start_due_probes()
            if any(self.roster.usable(i) for i in range(len(self.clients))):
                return self._pick(key)
            left = deadline - time.monotonic()
            if left <= 0:
                states = ", ".join(f"{url} ({self.roster.state(i)})" for i, url in enumerate(self.roster.urls))
                raise NoEngineAvailable(
                    f"no engine could take the request within the request timeout of {self.timeout:g} s "
                    f"(rollout.request_timeout_s): {states}"
                )
            await asyncio.sleep(min(WAIT_STEP_S, left))

    def _start_due_probes(self) -> None:
        for index in self.roster.due_for_probe():
            task = asyncio.get_running_loop().create_task(self._probe(index))
            self._probes.add(task)  # held, or the loop may drop the task before it ends
            task.add_done_callback(self._probes.discard)

    async def _probe(self, index: int) -> None:
        prober = self._probers[index]
        try:
            if not await asyncio.to_thread(prober.health):
                return  # still coming up: probed again later
            version = await asyncio.to_thread(_weight_version, prober)
        except EngineError:
            return
        self.roster.mark_up(index, version)

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


def _weight_version(client: EngineClient) -> int:
    """The engine's version; UNVERSIONED when it reports none (older SGLang)."""
    try:
        return version_number(client.get_weight_version())
    except EngineError as exc:
        if exc.status == 404:
            return UNVERSIONED
        raise


def _response_version(response) -> int:
    meta = response.get("meta_info") if isinstance(response, dict) else None
    return version_number(meta.get("weight_version")) if isinstance(meta, dict) else UNVERSIONED
