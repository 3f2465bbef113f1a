"""What every request path knows about the run's engines, shared across threads: which ones
answer, and which hold the weights last published.

An engine that drops a connection is down until a health probe says otherwise. One that comes
back (its process was restarted) serves the base model, not the trainer's weights: it is kept
out of rotation, listed by `needing_weights()`, until a push gives it the published version.
A response stamped with an older version than the one published when it was asked for is the
same sign, caught even when nobody saw the engine go down.

A version that is not an integer ("default", or none at all) cannot be compared: such an
engine is never held back for its version. The run's engines start at "0" (EngineFleet), so a
restarted one does compare, and lags once anything newer was published.
"""

from __future__ import annotations

import logging
import threading
import time

from loongsage.inference.resumable import UNVERSIONED

log = logging.getLogger(__name__)

PROBE_EVERY_S = 0.5  # how often a down engine is asked whether it is back


class EngineRoster:
    def __init__(self, urls: list[str] | tuple[str, ...], published: int = 0):
        if not urls:
            raise ValueError("engine_urls is empty: give at least one engine base URL")
        self.urls = [url.rstrip("/") for url in urls]
        self._lock = threading.Lock()
        self._published = published
        self._down_since: dict[int, float] = {}
        self._probe_at: dict[int, float] = {}
        self._needs_weights: set[int] = set()
        self.failures = 0  # requests that failed over to another try, over the run
        self.closed = False  # the engines are being stopped: nothing waits for them any more

    def close(self) -> None:
        """The engines are stopping for good: requests fail at once instead of waiting for them."""
        self.closed = True

    def published(self) -> int:
        return self._published

    def publish(self, version: int, urls: list[str]) -> None:
        """`urls` were just given `version`, which is now what every engine must serve. A newer
        version leaves the engines not in `urls` lagging; the same version again (a resync of
        engines that came back) changes only `urls`."""
        updated = {self._index(url) for url in urls}
        with self._lock:
            if version < self._published:
                raise ValueError(f"cannot publish weight version {version}: version {self._published} is published already")
            if version > self._published:
                # An engine left out of the push (it was down) now lags.
                self._needs_weights |= set(range(len(self.urls))) - updated
            self._published = version
            self._needs_weights -= updated

    def usable(self, index: int) -> bool:
        with self._lock:
            return index not in self._down_since and index not in self._needs_weights

    def mark_down(self, index: int, reason: str) -> None:
        with self._lock:
            self.failures += 1
            if index in self._down_since:
                return
            self._down_since[index] = time.monotonic()
            self._probe_at[index] = time.monotonic() + PROBE_EVERY_S
        log.warning(
            "engine %s stopped answering (%s); its requests go to the other engines until it is back", self.urls[index], reason
        )

    def due_for_probe(self) -> list[int]:
        """Down engines whose next health probe is due (each is then not due again for a while)."""
        now = time.monotonic()
        with self._lock:
            due = [index for index, at in self._probe_at.items() if at <= now]
            for index in due:
                self._probe_at[index] = now + PROBE_EVERY_S
            return due

    def mark_up(self, index: int, version: int) -> None:
        """A probe reached the engine again; it serves `version` (UNVERSIONED: cannot tell)."""
        with self._lock:
            if index not in self._down_since:
                return  # another probe got there first
            down_s = time.monotonic() - self._down_since.pop(index)
            self._probe_at.pop(index, None)
            published = self._published
            lagging = version != UNVERSIONED and version < published
            if lagging:
                self._needs_weights.add(index)
            elif version != UNVERSIONED:
                # It has the published weights after all (the push reached it before it went quiet).
                self._needs_weights.discard(index)
        log.warning(
            "engine %s answers again after %.1f s%s",
            self.urls[index],
            down_s,
            f" with weights of version {version} (published: {published}): out of rotation until it gets them" if lagging else "",
        )

    def mark_lagging(self, index: int, version: int) -> None:
        """It answered with weights older than the published ones."""
        with self._lock:
            self.failures += 1
            first = index not in self._needs_weights
            self._needs_weights.add(index)
        if first:
            log.warning(
                "engine %s serves version %d, older than the published %d: out of rotation until it gets the weights",
                self.urls[index],
                version,
                self._published,
            )

    def needing_weights(self) -> list[str]:
        """Engines that answer but lack the published weights: push to these."""
        with self._lock:
            return [self.urls[i] for i in sorted(self._needs_weights - set(self._down_since))]

    def answering(self) -> list[str]:
        """Engines not known to be down: a push to all of them should reach each."""
        with self._lock:
            return [url for i, url in enumerate(self.urls) if i not in self._down_since]

    def state(self, index: int) -> str:
        """'down', 'lacks version N' or 'usable': for messages."""
        with self._lock:
            if index in self._down_since:
                return "down"
            if index in self._needs_weights:
                return f"lacks version {self._published}"
            return "usable"

    def _index(self, url: str) -> int:
        try:
            return self.urls.index(url.rstrip("/"))
        except ValueError:
            raise ValueError(f"{url} is not one of the run's engines ({', '.join(self.urls)})") from None
