"""One asyncio event loop on its own thread that blocking callers in any thread run coroutines
on, so requests from every rollout thread share its connection pools."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any

CLOSE_TIMEOUT_S = 10.0


class RequestLoopClosed(RuntimeError):
    """The loop was closed before (or while) the caller's coroutine ran."""


class RequestLoop:
    def __init__(self, name: str):
        self.name = name
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()  # nothing is scheduled once `close` has begun
        self._closed = False
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run `coroutine` on the loop and wait for its result. RequestLoopClosed when the loop is
        closed first or closes meanwhile (what was running is cancelled rather than left to wait
        forever on a stopped loop)."""
        with self._lock:
            if self._closed:
                coroutine.close()
                raise RequestLoopClosed(f"{self.name} is closed")
            future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise RequestLoopClosed(f"{self.name} closed while the request was running") from None

    def close(self, last: Coroutine[Any, Any, Any] | None = None) -> None:
        """Cancel whatever still runs (its callers get RequestLoopClosed), await `last` (e.g.
        closing connection pools), stop the loop."""
        with self._lock:
            if self._closed:
                if last is not None:
                    last.close()
                return
            self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(_cancel_all_then(last), self._loop).result(CLOSE_TIMEOUT_S)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CLOSE_TIMEOUT_S)
            if not self._thread.is_alive():
                self._loop.close()


async def _cancel_all_then(last: Coroutine[Any, Any, Any] | None) -> None:
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    if last is not None:
        await last
