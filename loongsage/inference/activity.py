"""How much of the time the engines had work: the rollout side's idle ratio.

Measured where requests are sent (the completion sampler, the router), so it reads the same for
the embedded engine and for SGLang. The engines count as idle when no request is in flight
and while they are paused for a weight update.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class ActivityMeter:
    def __init__(self):
        self._lock = threading.Lock()
        self._in_flight = 0
        self._paused = 0
        self._idle_total = 0.0
        self._idle_since: float | None = time.perf_counter()

    @contextmanager
    def request(self):
        """Around one request to an engine."""
        self._change(in_flight=+1)
        try:
            yield
        finally:
            self._change(in_flight=-1)

    @contextmanager
    def paused(self):
        """Around a weight update that stops generation."""
        self._change(paused=+1)
        try:
            yield
        finally:
            self._change(paused=-1)

    def idle_seconds(self) -> float:
        """Idle time since the meter was made, up to now."""
        with self._lock:
            current = time.perf_counter() - self._idle_since if self._idle_since is not None else 0.0
            return self._idle_total + current

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _change(self, in_flight: int = 0, paused: int = 0) -> None:
        now = time.perf_counter()
        with self._lock:
            self._in_flight += in_flight
            self._paused += paused
            idle = self._in_flight == 0 or self._paused > 0
            if idle and self._idle_since is None:
                self._idle_since = now
            elif not idle and self._idle_since is not None:
                self._idle_total += now - self._idle_since
                self._idle_since = None


class IdleClock:
    """Idle ratio of a meter over consecutive intervals (one training step each)."""

    def __init__(self, meter: ActivityMeter):
        self.meter = meter
        self._wall = time.perf_counter()
        self._idle = meter.idle_seconds()

    def lap(self) -> float:
        wall, idle = time.perf_counter(), self.meter.idle_seconds()
        ratio = (idle - self._idle) / max(wall - self._wall, 1e-9)
        self._wall, self._idle = wall, idle
        return min(max(ratio, 0.0), 1.0)
