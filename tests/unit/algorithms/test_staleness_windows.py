"""Staleness windows and the pipeline buffer: the bound holds, nothing is lost or trained twice,
whatever order rollouts finish in."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loongsage.algorithms.staleness_windows import WINDOWS, StalenessWindow, WindowGated, build_window
from loongsage.controller.interruptible import StepInterrupted
from loongsage.controller.pipeline import FinishedGroup, PipelineBuffer, ThreadedPipeline

WAIT_S = 60  # bounds a hang only: CI runs on 2 loaded cores


class _Driver:
    """Rollout and training interleaved by a script of random choices: start a group, finish a
    random running one, take a batch (train) and publish the next version."""

    def __init__(self, window: str, batch: int, max_staleness: int, max_inflight: int):
        self.buffer = PipelineBuffer(build_window(window, batch, max_staleness), max_inflight)
        self.max_staleness = max_staleness
        self.version = 0
        self.running: dict[int, int] = {}  # index -> version of its first token
        self.trained: list[int] = []
        self.staleness: list[int] = []

    def act(self, choice: int, pick: int) -> None:
        if choice == 0:
            index = self.buffer.try_start()
            if index is not None:
                self.running[index] = self.version
        elif choice == 1 and self.running:
            index = sorted(self.running)[pick % len(self.running)]
            oldest = self.running.pop(index)
            self.buffer.finish(FinishedGroup(index, oldest, self.version), keep=pick % 7 != 0)
        elif choice == 2:
            taken = self.buffer.try_take(self.version)
            if taken is not None:
                batch, stats = taken
                self.trained += [group.index for group in batch]
                self.staleness += stats.staleness
                self.buffer.published()
                self.version += 1


@settings(max_examples=150, deadline=None)
@given(
    window=st.sampled_from(sorted(WINDOWS)),
    batch=st.integers(1, 4),
    max_staleness=st.integers(0, 3),
    max_inflight=st.integers(1, 12),
    script=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1000)), min_size=1, max_size=400),
)
def test_staleness_bound_and_conservation_over_random_orders(window, batch, max_staleness, max_inflight, script):
    driver = _Driver(window, batch, max_staleness, max_inflight)
    for choice, pick in script:
        driver.act(choice, pick)
    b = driver.buffer
    assert all(0 <= s <= max_staleness for s in driver.staleness)
    assert len(driver.trained) == len(set(driver.trained)), "a group was trained twice"
    assert b.running == len(driver.running)
    # Every started group is accounted for exactly once.
    assert b.next_index == len(driver.trained) + b.dropped_stale + b.filtered + len(b.ready) + b.running
    assert b.trained == len(driver.trained)
    assert all(len(driver.trained[i : i + batch]) == batch for i in range(0, len(driver.trained), batch))


def test_window_gated_follows_areal_admission_rule():
    window = WindowGated(batch_size=4, max_staleness=1)
    # (eta + version + 1) * B - (accepted + running) > 0
    assert window.may_start(0, 0, 7, 0)
    assert not window.may_start(0, 0, 8, 0)
    assert not window.may_start(0, 5, 3, 5)
    assert window.may_start(1, 5, 3, 1)  # one published version later: a batch more
    assert not window.may_start(1, 8, 4, 0)


def test_max_staleness_zero_gated_is_the_synchronous_schedule():
    buffer = PipelineBuffer(build_window("window_gated", 2, 0), max_inflight=8)
    assert [buffer.try_start() for _ in range(3)] == [0, 1, None]
    for index in (1, 0):
        buffer.finish(FinishedGroup(index, 0, 0))
    batch, stats = buffer.try_take(0)
    assert [g.index for g in batch] == [0, 1] and stats.staleness == [0, 0]
    assert buffer.try_start() is None, "the next batch must wait for the new weights"
    buffer.published()
    assert [buffer.try_start() for _ in range(3)] == [2, 3, None]


def test_windowed_fifo_trains_oldest_first_and_drops_what_falls_out():
    window = build_window("windowed_fifo", 2, 1)
    ready = [FinishedGroup(0, 3, 3), FinishedGroup(1, 1, 2), FinishedGroup(2, 2, 3), FinishedGroup(3, 0, 1)]
    batch, dropped = window.select(ready, version=2)
    assert [g.index for g in dropped] == [3]  # 2 - 0 > 1
    assert [g.index for g in batch] == [1, 2]  # oldest admissible (versions 1 and 2), in admission order


def test_no_window_takes_completion_order_and_admits_freely():
    window = build_window("no_window", 2, 0)
    assert window.may_start(0, 100, 100, 100)
    ready = [FinishedGroup(5, 4, 4), FinishedGroup(2, 4, 4), FinishedGroup(9, 4, 4)]
    batch, dropped = window.select(ready, version=4)
    assert [g.index for g in batch] == [2, 5] and dropped == []


def test_a_short_batch_is_not_taken():
    window = build_window("window_gated", 3, 1)
    batch, dropped = window.select([FinishedGroup(0, 0, 0), FinishedGroup(1, 0, 0)], version=0)
    assert batch == [] and dropped == []


def test_user_window_by_import_path_and_unknown_name():
    assert isinstance(build_window("loongsage.algorithms.staleness_windows:WindowedFifo", 2, 1), StalenessWindow)
    with pytest.raises(ValueError, match="unknown staleness window 'lifo'"):
        build_window("lifo", 2, 1)
    with pytest.raises(ValueError, match="max_staleness=-1"):
        build_window("no_window", 2, -1)


def test_threaded_pipeline_counts_across_threads():
    """Producers and a trainer on threads: every group is trained once, none is lost."""
    pipeline = ThreadedPipeline(PipelineBuffer(build_window("window_gated", 4, 1), max_inflight=6))
    version = [0]
    trained: list[int] = []

    def producer():  # ends when the pipeline closes; the timeout only bounds a hang
        while (index := pipeline.start(timeout=WAIT_S)) is not None:
            pipeline.finish(FinishedGroup(index, version[0], version[0]))

    threads = [threading.Thread(target=producer) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(10):
        batch, stats, _ = pipeline.take(version[0], timeout=WAIT_S)
        assert max(stats.staleness) <= 1
        trained += [group.index for group in batch]
        version[0] += 1
        pipeline.published()
    pipeline.close()
    for thread in threads:
        thread.join(timeout=WAIT_S)
    assert sorted(trained) == list(range(40))


def test_threaded_pipeline_raises_a_failed_group_to_the_trainer():
    pipeline = ThreadedPipeline(PipelineBuffer(build_window("window_gated", 2, 0), max_inflight=2))
    assert pipeline.start() == 0
    pipeline.fail(ConnectionError("engine http://127.0.0.1:1 refused"))
    with pytest.raises(RuntimeError, match="rollout failed: ConnectionError: engine http://127.0.0.1:1 refused"):
        pipeline.take(0, timeout=5)


def test_a_group_that_fails_as_the_run_stops_is_the_stop_not_a_failure():
    """A terminal's Ctrl-C reaches an agent's processes too: their group fails as the stop is asked."""
    pipeline = ThreadedPipeline(PipelineBuffer(build_window("window_gated", 2, 0), max_inflight=2))
    pipeline.start()
    pipeline.fail(RuntimeError("prompt group 0 (item a) produced no samples"))
    with pytest.raises(StepInterrupted, match="stopped waiting for a training batch"):
        pipeline.take(0, timeout=5, stop=lambda: True)


def test_threaded_pipeline_times_out_with_its_state():
    pipeline = ThreadedPipeline(PipelineBuffer(build_window("window_gated", 2, 0), max_inflight=2))
    pipeline.start()
    with pytest.raises(TimeoutError, match="2 running, 0 ready"):
        pipeline.take(0, timeout=0.1)


def test_wait_until_idle_holds_admissions_until_published():
    pipeline = ThreadedPipeline(PipelineBuffer(build_window("no_window", 2, 1), max_inflight=1))
    first = pipeline.start()
    threading.Timer(0.2, lambda: pipeline.finish(FinishedGroup(first, 0, 0))).start()
    pipeline.wait_until_idle(timeout=WAIT_S)
    assert pipeline.buffer.running == 0
    assert pipeline.start(timeout=0.1) is None, "no admission while a weight update is pending"
    pipeline.published()
    assert pipeline.start(timeout=1) == 1


def test_a_start_the_window_allows_is_counted_before_any_producer_picks_it_up():
    """one_step_off relies on it: right after `published` the next batch counts as running, so
    the following weight update waits for it instead of racing past a producer still asleep."""
    pipeline = ThreadedPipeline(PipelineBuffer(build_window("window_gated", 2, 0), max_inflight=4))
    assert pipeline.buffer.running == 2
    for _ in range(2):
        pipeline.finish(FinishedGroup(pipeline.start(), 0, 0))
    pipeline.take(0, timeout=1)
    pipeline.published()
    assert pipeline.buffer.running == 2 and pipeline.buffer.next_index == 4
