"""The pipeline buffer between rollout and training: which groups run, which are ready, which
were dropped, and how stale what training took was.

`PipelineBuffer` is plain bookkeeping around a staleness window, with no threads and no
clock, so the threaded controller and the discrete-event simulator share it.
`ThreadedPipeline` adds the lock and the waiting.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loongsage.algorithms.staleness_windows import StalenessWindow
from loongsage.controller.interruptible import StepInterrupted, poll_timeout


@dataclass
class FinishedGroup:
    """One prompt's rollouts, finished. `payload` is whatever the producer made (samples)."""

    index: int
    oldest_version: int
    newest_version: int
    payload: Any = None
    num_samples: int = 0


@dataclass
class TakeStats:
    """What one training step took and what was dropped on the way."""

    staleness: list[int] = field(default_factory=list)  # one per group taken
    dropped: list[int] = field(default_factory=list)  # indices dropped since the previous take, out of the window


class PipelineBuffer:
    def __init__(self, window: StalenessWindow, max_inflight: int):
        if max_inflight < 1:
            raise ValueError(f"max_inflight={max_inflight} must be >= 1")
        self.window = window
        self.max_inflight = max_inflight
        self.steps = 0  # weight versions published by training since the pipeline started
        self.next_index = 0
        self.running = 0
        self.ready: list[FinishedGroup] = []
        self.trained = 0  # groups handed to training
        self.dropped_stale = 0
        self.filtered = 0  # groups finished but not kept (e.g. zero reward variance)
        self.failed = 0
        self._dropped_since_take: list[int] = []

    @property
    def accepted(self) -> int:
        return self.trained + len(self.ready)

    def try_start(self) -> int | None:
        """The admission index of a group that may start now, or None."""
        if self.running >= self.max_inflight:
            return None
        if not self.window.may_start(self.steps, self.accepted, self.running, len(self.ready)):
            return None
        index, self.next_index = self.next_index, self.next_index + 1
        self.running += 1
        return index

    def finish(self, group: FinishedGroup, keep: bool = True) -> None:
        """A started group is done; `keep=False` when it carries nothing to train on."""
        self.running -= 1
        if keep:
            self.ready.append(group)
        else:
            self.filtered += 1

    def fail(self) -> None:
        """A started group ended without a result (its error is the producer's to report)."""
        self.running -= 1
        self.failed += 1

    def try_take(self, version: int) -> tuple[list[FinishedGroup], TakeStats] | None:
        """A batch for a training step at `version`, or None while there is none yet. Groups
        out of the window are dropped either way."""
        batch, dropped = self.window.select(self.ready, version)
        gone = {id(group) for group in [*batch, *dropped]}
        self.ready = [group for group in self.ready if id(group) not in gone]
        self.dropped_stale += len(dropped)
        self._dropped_since_take += [group.index for group in dropped]
        if not batch:
            return None
        self.trained += len(batch)
        stats = TakeStats([version - group.oldest_version for group in batch], self._dropped_since_take)
        self._dropped_since_take = []
        return batch, stats

    def published(self) -> None:
        """Training published new weights: the window moves on by one version."""
        self.steps += 1


class ThreadedPipeline:
    """PipelineBuffer under a lock, with blocking waits for the producer and the trainer."""

    def __init__(self, buffer: PipelineBuffer):
        self.buffer = buffer
        self._cond = threading.Condition()
        self._closed = False
        self._holding = False  # no admissions while a weight update waits for the engines to drain
        self.error: BaseException | None = None  # the first failed group's, raised to the trainer
        # Groups are admitted under the lock, by whichever state change made room, so a caller that
        # sees the buffer never misses a start the window already allowed; producers pick them up.
        self._admitted: deque[int] = deque()
        with self._cond:
            self._admit()

    def start(self, timeout: float | None = None) -> int | None:
        """Block until a group may start (its index), or None once closed or timed out."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._admitted, timeout)
            return None if self._closed or not self._admitted else self._admitted.popleft()

    def finish(self, group: FinishedGroup, keep: bool = True) -> None:
        with self._cond:
            self.buffer.finish(group, keep)
            self._admit()

    def fail(self, error: BaseException) -> None:
        with self._cond:
            self.buffer.fail()
            self.error = self.error or error
            self._admit()

    def take(
        self, version: int, timeout: float | None = None, stop: Callable[[], bool] = lambda: False
    ) -> tuple[list[FinishedGroup], TakeStats, float]:
        """Block until a batch is ready: (batch, stats, seconds waited). `stop` is polled while
        waiting; once it is true the wait ends with StepInterrupted and nothing is taken."""
        started = time.perf_counter()
        deadline = None if timeout is None else started + timeout
        with self._cond:
            taken: list[tuple[list[FinishedGroup], TakeStats]] = []

            def batch_ready() -> bool:
                result = None if self._closed or self.error else self.buffer.try_take(version)
                if result is not None:
                    taken.append(result)
                return self._closed or self.error is not None or result is not None

            while not self._cond.wait_for(batch_ready, poll_timeout(deadline)):
                if stop():
                    raise StepInterrupted(f"stopped waiting for a training batch: {self.describe()}")
                if deadline is not None and time.perf_counter() >= deadline:
                    break
            if self.error is not None:
                # A Ctrl-C in a terminal reaches every process of the group at once: an agent's git
                # or program dies of it, and its group fails just as the stop is asked for.
                if stop():
                    raise StepInterrupted(f"stopped waiting for a training batch: {self.describe()}") from self.error
                raise RuntimeError(f"rollout failed: {type(self.error).__name__}: {self.error}") from self.error
            if not taken:
                if self._closed:
                    raise RuntimeError("the rollout pipeline is closed")
                raise TimeoutError(f"no training batch within {timeout} s: {self.describe()}")
            self._admit()  # taking frees room in the window
            return taken[0][0], taken[0][1], time.perf_counter() - started

    def wait_until_idle(self, timeout: float | None = None) -> None:
        """Stop admitting and block until no admitted group is running (admissions resume at
        `published`). Groups admitted but not yet picked up by a producer count as running."""
        with self._cond:
            self._holding = True
            if not self._cond.wait_for(lambda: self.buffer.running == 0 or self._closed, timeout):
                raise TimeoutError(f"rollout did not drain within {timeout} s: {self.describe()}")

    def published(self) -> None:
        with self._cond:
            self.buffer.published()
            self._holding = False
            self._admit()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def _admit(self) -> None:
        """Start every group the window allows now (call with the lock held)."""
        while not (self._closed or self._holding) and (index := self.buffer.try_start()) is not None:
            self._admitted.append(index)
        self._cond.notify_all()

    def describe(self) -> str:
        b = self.buffer
        return (
            f"{b.running} running, {len(b.ready)} ready, {b.trained} trained, {b.dropped_stale} dropped as stale, "
            f"{b.filtered} filtered, {b.failed} failed"
        )
