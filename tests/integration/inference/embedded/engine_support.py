"""The real embedded engine over HTTP, as the engine, router and fuzz tests start it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.server import EmbeddedServer

WAIT_S = 120  # for a state a test waits on: generous, CI runs on 2 loaded cores


@contextmanager
def running_engine(model_path: str, max_context: int = 256, **engine_cfg) -> Iterator[EmbeddedServer]:
    """One engine thread (the tests share two cores), serving until the block ends."""
    server = EmbeddedServer(Engine(model_path, {"max_running": 16, "max_context": max_context, "num_threads": 1, **engine_cfg}))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def wait_until_queued(server: EmbeddedServer, count: int) -> None:
    """Until `count` requests wait in the (paused) engine's queue."""
    deadline = time.monotonic() + WAIT_S
    while len(server.engine.scheduler._waiting) < count:
        assert time.monotonic() < deadline, f"{count} requests were not queued within {WAIT_S} s"
        time.sleep(0.01)
