"""Waits the controller can give up: when the run must stop (Slurm's warning signal), a step
still waiting for its rollout is abandoned rather than finished, so the checkpoint is written
within the signal's delay however long the rollout would have taken."""
from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import Callable, TypeVar

STOP_POLL_S = 0.5  # how often a blocked wait looks at its stop condition

T = TypeVar("T")


class StepInterrupted(Exception):
    """A wait for the next training batch was given up (the run is stopping, e.g. preempted).
    `abandoned`: the thread still doing the given-up work, if any, to be waited for at shutdown.
    `trainer_busy`: the given-up work was the trainer's, whose state is then half-updated and
    must not be saved."""

    def __init__(self, message: str, abandoned: threading.Thread | None = None, trainer_busy: bool = False):
        super().__init__(message)
        self.abandoned = abandoned
        self.trainer_busy = trainer_busy


def poll_timeout(deadline: float | None) -> float:
    """The next wait's timeout: the poll interval, or less when `deadline` (perf_counter) is nearer."""
    return STOP_POLL_S if deadline is None else max(0.0, min(STOP_POLL_S, deadline - time.perf_counter()))


def call_interruptibly(fn: Callable[[], T], stop: Callable[[], bool], name: str, trainer_busy: bool = False) -> T:
    """`fn()` in a daemon thread, waited for from here: its result or exception, or StepInterrupted
    once `stop()` is true. An abandoned `fn` goes on in the background; its result is dropped and
    the run is about to end: wait for the thread (`StepInterrupted.abandoned`) once what it waits
    on is stopped, because Ray ends a process one of whose threads calls it after shutdown."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["result"] = fn()
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc

    worker = threading.Thread(target=target, name=name, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(STOP_POLL_S)
        if worker.is_alive() and stop():
            raise StepInterrupted(f"stopped waiting for {name}", abandoned=worker, trainer_busy=trainer_busy)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def thread_stacks(threads: list[threading.Thread]) -> str:
    """Where each of `threads` is now (for a warning about threads that did not end)."""
    frames = sys._current_frames()
    return "".join(f"thread {thread.name}:\n" + "".join(traceback.format_stack(frames[thread.ident]))
                   for thread in threads if thread.ident in frames)
