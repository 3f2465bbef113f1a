"""Waits the controller can give up: when the run must stop (Slurm's warning signal), a step
still waiting for its rollout is abandoned rather than finished, so the checkpoint is written
within the signal's delay however long the rollout would have taken."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import TypeVar

STOP_POLL_S = 0.5  # how often a blocked wait looks at its stop condition

T = TypeVar("T")


class StepInterrupted(Exception):
    """A wait for the next training batch was given up (the run is stopping, e.g. preempted).
    `trainer_busy`: the given-up work was the trainer's, whose state is then half-updated and
    must not be saved."""

    def __init__(self, message: str, trainer_busy: bool = False):
        super().__init__(message)
        self.trainer_busy = trainer_busy


def poll_timeout(deadline: float | None) -> float:
    """The next wait's timeout: the poll interval, or less when `deadline` (perf_counter) is nearer."""
    return STOP_POLL_S if deadline is None else max(0.0, min(STOP_POLL_S, deadline - time.perf_counter()))


class InterruptibleCalls:
    """The controller's long calls (the warm start, a training step, a weight sync), each run on
    a daemon thread of this object's and waited for from the caller's, so a stop can give up
    waiting. A call given up on goes on in the background, its result dropped; `close` waits for
    it once what it waits on is stopped, because Ray ends a process one of whose threads calls it
    after ray.shutdown(). (Daemon threads: a call that never returns must not hold the exit.)"""

    def __init__(self, name: str):
        self.name = name
        self._thread: threading.Thread | None = None

    def call(self, fn: Callable[[], T], stop: Callable[[], bool], what: str, trainer_busy: bool = False) -> T:
        """`fn()`'s result or exception, or StepInterrupted once `stop()` is true."""
        outcome: Future = Future()

        def target() -> None:
            try:
                outcome.set_result(fn())
            except BaseException as exc:  # handed to the waiting thread
                outcome.set_exception(exc)

        self._thread = threading.Thread(target=target, name=f"{self.name}: {what}", daemon=True)
        self._thread.start()
        while not futures_wait([outcome], STOP_POLL_S).done:
            if stop():
                raise StepInterrupted(f"stopped waiting for {what}", trainer_busy=trainer_busy)
        return outcome.result()

    def close(self, timeout: float) -> threading.Thread | None:
        """Wait up to `timeout` for a call given up on; the thread if it still runs."""
        if self._thread is None:
            return None
        self._thread.join(timeout)
        return self._thread if self._thread.is_alive() else None


def thread_stacks(threads: list[threading.Thread]) -> str:
    """Where each of `threads` is now (for a warning about threads that did not end)."""
    frames = sys._current_frames()
    return "".join(
        f"thread {thread.name}:\n" + "".join(traceback.format_stack(frames[thread.ident]))
        for thread in threads
        if thread.ident in frames
    )
