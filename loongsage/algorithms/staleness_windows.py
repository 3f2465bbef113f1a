"""Staleness windows: which rollouts may start, and which finished ones a training step takes.

Versions count weight updates: the trainer at version v trains the weights the engines
serve as version v and then publishes v + 1. A finished rollout group's staleness at that
step is `v - oldest_version`, the version of its oldest token. Every window keeps
`staleness <= max_staleness` for everything it hands to training (what falls outside is
dropped and counted); windows differ in when they let new rollouts start and in which
ready groups they train on first.

Pure scheduling code: no threads, no clocks. The threaded pipeline and the discrete-event
simulator (`python -m loongsage.bench async --simulate`) drive the same objects.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from loongsage.registry import Registry


class ReadyGroup(Protocol):
    index: int  # admission order, from 0
    oldest_version: int  # weight version of the group's oldest generated token


class StalenessWindow:
    """Base: capacity-bounded admission, completion-order selection, stale groups dropped.

    `batch_size` and every count are in groups (one prompt and its group_size rollouts).
    """

    name = "base"

    def __init__(self, batch_size: int, max_staleness: int):
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        if max_staleness < 0:
            raise ValueError(f"max_staleness={max_staleness} must be >= 0")
        self.batch_size = batch_size
        self.max_staleness = max_staleness
        # What may exist at once, ready or running: a batch for every version in the window.
        self.capacity = math.ceil(batch_size * (1 + max_staleness))

    def may_start(self, steps: int, accepted: int, running: int, ready: int) -> bool:
        """May one more rollout group start now? `steps`: batches taken for training so far;
        `accepted`: groups kept so far (trained or ready; dropped ones do not count);
        `running`: groups in flight; `ready`: finished groups not yet trained."""
        return ready + running < self.capacity

    def select(self, ready: Sequence[ReadyGroup], version: int) -> tuple[list[ReadyGroup], list[ReadyGroup]]:
        """(batch, dropped) for a step at `version`: `batch` is `batch_size` groups in
        admission order, or empty while not enough admissible groups are ready; `dropped`
        are groups too stale to train on ever again (staleness only grows)."""
        dropped = [group for group in ready if self.too_stale(group, version)]
        admissible = [group for group in self.order(ready) if not self.too_stale(group, version)]
        if len(admissible) < self.batch_size:
            return [], dropped
        return sorted(admissible[: self.batch_size], key=lambda group: group.index), dropped

    def order(self, ready: Sequence[ReadyGroup]) -> list[ReadyGroup]:
        """Preference among ready groups; the base takes them as they finished."""
        return list(ready)

    def too_stale(self, group: ReadyGroup, version: int) -> bool:
        return version - group.oldest_version > self.max_staleness


class NoWindow(StalenessWindow):
    """Rollouts start whenever the pipeline has a free slot (its concurrency cap), however far
    ahead of training they get; training takes groups as they finish, and whatever has outlived
    the bound by then is dropped. Fastest to fill, most wasteful when rollout outruns training."""

    name = "no_window"

    def may_start(self, steps: int, accepted: int, running: int, ready: int) -> bool:
        return True


class WindowGated(StalenessWindow):
    """AReaL's admission rule: a group may start only while
    `(max_staleness + steps + 1) * batch_size - (accepted + running) > 0`, so no more groups
    are started than the next max_staleness + 1 steps can use. With max_staleness = 0 this is
    the synchronous schedule: one batch starts, is trained on, then the next."""

    name = "window_gated"

    def may_start(self, steps: int, accepted: int, running: int, ready: int) -> bool:
        return (self.max_staleness + steps + 1) * self.batch_size - (accepted + running) > 0


class WindowedFifo(StalenessWindow):
    """Admission bounded by the window's capacity (ready + running <= batch_size * (1 +
    max_staleness)); training takes the oldest admissible groups first (by oldest token
    version, then admission order), so data is used before it falls out of the window."""

    name = "windowed_fifo"

    def order(self, ready: Sequence[ReadyGroup]) -> list[ReadyGroup]:
        return sorted(ready, key=lambda group: (group.oldest_version, group.index))


# Entries are constructed as `window(batch_size, max_staleness)` (see build_window).
WINDOWS: Registry[type[StalenessWindow]] = Registry("staleness window")
for _window in (NoWindow, WindowGated, WindowedFifo):
    WINDOWS.register(_window.name, _window)


def build_window(name: str, batch_size: int, max_staleness: int) -> StalenessWindow:
    """A registered window by name, or a StalenessWindow subclass by import path."""
    return WINDOWS.get(name)(batch_size, max_staleness)
