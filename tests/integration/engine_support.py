"""The real embedded engine over HTTP, as the engine, router and fuzz tests start it."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.server import EmbeddedServer


@contextmanager
def running_engine(model_path: str, max_context: int = 256, **engine_cfg) -> Iterator[EmbeddedServer]:
    """One engine thread (the tests share two cores), serving until the block ends."""
    server = EmbeddedServer(Engine(model_path, {"max_running": 16, "max_context": max_context, "num_threads": 1,
                                                **engine_cfg}))
    server.start()
    try:
        yield server
    finally:
        server.stop()
