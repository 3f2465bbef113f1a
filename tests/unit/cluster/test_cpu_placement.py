"""Placement on a CPU machine: who gets which cores."""

from __future__ import annotations

import os
import threading

import pytest

from loongsage.cluster.cpu_placement import pin_this_process
from loongsage.config.placement import resolve_placement, split_cores


def test_auto_colocates_the_synchronous_loop_only():
    assert resolve_placement("auto", "sync") == "colocate"
    assert resolve_placement("auto", "fully_async") == "disaggregated"
    assert resolve_placement("auto", "one_step_off") == "disaggregated"
    assert resolve_placement("colocate", "sync") == "colocate"


def test_colocate_pins_nothing():
    assert split_cores("colocate", 2, 1, cores=[0, 1]) == (None, None)


@pytest.mark.parametrize(
    "ranks, engines, cores, trainer, engine",
    [
        (1, 1, [0, 1], [[0]], [[1]]),
        (1, 1, [0, 1, 2, 3, 4, 5, 6, 7], [[0, 1, 2, 3]], [[4, 5, 6, 7]]),
        (2, 1, [0, 1, 2, 3, 4, 5], [[0, 1], [2, 3]], [[4, 5]]),
        (1, 3, [4, 5, 6, 7, 8], [[4]], [[5, 6], [7], [8]]),
        (3, 1, [0, 1, 2, 3], [[0], [1], [2]], [[3]]),
    ],
)
def test_disaggregated_splits_the_cores_without_overlap(ranks, engines, cores, trainer, engine):
    got_trainer, got_engine = split_cores("disaggregated", ranks, engines, cores=cores)
    assert (got_trainer, got_engine) == (trainer, engine)
    flat = [c for chunk in [*got_trainer, *got_engine] for c in chunk]
    assert sorted(flat) == sorted(cores) and len(flat) == len(set(flat))


def test_too_few_cores_is_refused_with_the_arithmetic():
    with pytest.raises(ValueError, match=r"trainer.world_size \+ rollout.num_engines = 2 \+ 1 = 3 > 2 cores"):
        split_cores("disaggregated", 2, 1, cores=[0, 1])


def test_pinning_covers_threads_started_later():
    available = sorted(os.sched_getaffinity(0))
    result = {}

    def child():
        pin_this_process(available[:1])
        worker = threading.Thread(target=lambda: result.setdefault("cores", os.sched_getaffinity(0)))
        worker.start()
        worker.join()

    thread = threading.Thread(target=child)
    thread.start()
    thread.join()
    try:
        assert result["cores"] == set(available[:1])
    finally:
        pin_this_process(available)
