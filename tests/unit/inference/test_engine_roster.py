"""The roster's bookkeeping: which engines are down, which lack the published weights, and what
a push, a resync and a probe change about it."""

from __future__ import annotations

import threading

import pytest

from loongsage.inference import engine_roster
from loongsage.inference.engine_roster import EngineRoster
from loongsage.inference.resumable import UNVERSIONED

A, B, C = "http://a:1", "http://b:2", "http://c:3"


def usable(roster: EngineRoster) -> list[bool]:
    return [roster.usable(i) for i in range(len(roster.urls))]


def test_a_new_version_leaves_the_engines_not_pushed_to_lagging():
    roster = EngineRoster([A, B + "/", C])
    assert roster.urls == [A, B, C] and usable(roster) == [True] * 3
    roster.mark_down(1, "refused")
    roster.publish(1, roster.answering())
    assert roster.published() == 1
    assert roster.needing_weights() == []  # B is down: nothing to push to yet
    assert usable(roster) == [True, False, True]


def test_a_resync_at_the_same_version_touches_only_the_engines_it_names():
    roster = EngineRoster([A, B, C], published=3)
    roster.mark_lagging(1, 2)
    assert roster.needing_weights() == [B]
    roster.publish(3, [B + "/"])  # the controller's resync after pushing to B
    assert roster.needing_weights() == [] and usable(roster) == [True] * 3


def test_an_engine_back_with_old_weights_is_listed_for_a_push_and_kept_out():
    roster = EngineRoster([A, B], published=4)
    roster.mark_down(0, "refused")
    assert roster.answering() == [B] and roster.needing_weights() == []
    roster.mark_up(0, 0)  # a restarted process serves the base model
    assert roster.answering() == [A, B]
    assert roster.needing_weights() == [A] and usable(roster) == [False, True]
    assert roster.state(0) == "lacks version 4"


def test_an_engine_back_with_the_published_weights_is_usable_again():
    roster = EngineRoster([A, B])
    roster.mark_down(1, "refused")
    roster.publish(1, [A])
    roster.mark_up(1, 1)  # the push reached it after all
    assert usable(roster) == [True, True] and roster.needing_weights() == []


def test_a_version_that_is_not_a_number_never_holds_an_engine_back():
    """A standalone router's engines say "default": nothing to compare against."""
    roster = EngineRoster([A])
    roster.mark_down(0, "refused")
    roster.mark_up(0, UNVERSIONED)
    assert usable(roster) == [True]


def test_publishing_an_older_version_or_an_unknown_engine_is_refused():
    roster = EngineRoster([A, B], published=5)
    with pytest.raises(ValueError, match="version 4: version 5 is published"):
        roster.publish(4, [A])
    with pytest.raises(ValueError, match="http://z:9 is not one of the run's engines"):
        roster.publish(6, ["http://z:9"])
    assert roster.published() == 5 and usable(roster) == [True, True]


def test_no_engines_is_a_clear_error():
    with pytest.raises(ValueError, match="engine_urls is empty"):
        EngineRoster([])


def test_a_down_engine_is_due_for_a_probe_once_per_interval(monkeypatch):
    monkeypatch.setattr(engine_roster, "PROBE_EVERY_S", 0.0)
    roster = EngineRoster([A, B])
    assert roster.due_for_probe() == []
    roster.mark_down(1, "refused")
    roster.mark_down(1, "refused again")  # still one outage, two failed requests
    assert roster.failures == 2 and roster.state(1) == "down"
    assert roster.due_for_probe() == [1]
    roster.mark_up(1, 0)
    assert roster.due_for_probe() == [] and roster.state(1) == "usable"


def test_only_a_push_brings_back_an_engine_that_answered_stale():
    """A probe's report is about engines that were down: a late one (another probe got there
    first) changes nothing, nor does it clear what a stale answer showed."""
    roster = EngineRoster([A, B], published=2)
    roster.mark_lagging(0, 1)
    roster.mark_up(0, 2)
    assert roster.needing_weights() == [A] and usable(roster) == [False, True]
    roster.publish(2, [A])
    assert usable(roster) == [True, True]


def test_threads_marking_at_once_count_every_failure():
    roster = EngineRoster([A, B])

    def fail():
        for _ in range(500):
            roster.mark_down(0, "refused")
            roster.mark_lagging(1, 0)

    threads = [threading.Thread(target=fail) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert roster.failures == 4000
    assert usable(roster) == [False, False] and roster.answering() == [B] and roster.needing_weights() == [B]
