"""The engine pool against engines over real HTTP (StandinEngine, served by uvicorn): affinity,
least-loaded choice, and what happens when an engine drops, refuses, answers stale or restarts."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from loongsage.inference.client import EngineError
from loongsage.inference.engine_pool import EnginePool, NoEngineAvailable
from loongsage.inference.engine_roster import EngineRoster
from tests.standins.engine import StandinEngine

SETTLE_S = 20.0  # the most a test waits for something that takes a probe interval or two


@pytest.fixture
def engines(request):
    doubles = [StandinEngine(name=f"e{i}") for i in range(getattr(request, "param", 2))]
    yield doubles
    for double in doubles:
        double.stop()


def send(rid: str):
    return lambda client: client.agenerate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 1}, rid=rid)


def served(engine: StandinEngine) -> list[str]:
    return [body["rid"] for body in engine.requests]


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {SETTLE_S} s")
        await asyncio.sleep(0.01)


def run(pool: EnginePool, scenario):
    async def with_close():
        try:
            return await scenario()
        finally:
            await pool.aclose()

    return asyncio.run(with_close())


@pytest.mark.parametrize("engines", [3], indirect=True)
def test_a_key_sticks_to_its_engine_and_a_new_key_goes_to_the_least_loaded(engines):
    e0, e1, e2 = engines
    pool = EnginePool([e.url for e in engines])

    async def scenario():
        e0.hold()
        e1.hold()
        first = asyncio.create_task(pool.call("a", send("a1")))
        await until(lambda: e0.waiting == 1, "held on e0")
        second = asyncio.create_task(pool.call("b", send("b1")))
        await until(lambda: e1.waiting == 1, "held on e1")  # e0 is busy
        again = asyncio.create_task(pool.call("a", send("a2")))
        await until(lambda: e0.waiting == 2, "held on e0 twice")  # busy, but it holds a's prefix
        assert pool.in_flight == [2, 1, 0]
        await pool.call("c", send("c1"))  # e0 and e1 are busy: c goes to the idle one
        e0.release()
        e1.release()
        await asyncio.gather(first, second, again)
        assert pool.in_flight == [0, 0, 0] and pool.keys_held == [1, 1, 1]
        await pool.call("d", send("d1"))  # all idle, each holding one key: the first
        await pool.call("b", send("b2"))

    run(pool, scenario)
    assert sorted(served(e0)) == ["a1", "a2", "d1"] and served(e1) == ["b1", "b2"] and served(e2) == ["c1"]
    assert pool.keys_held == [2, 1, 1] and pool.engine_for("a") is pool.clients[0]


def test_anonymous_requests_are_not_remembered_and_forget_frees_the_slot(engines):
    pool = EnginePool([e.url for e in engines])

    async def scenario():
        await pool.call(None, send("anonymous"))
        await pool.call("x", send("x1"))

    run(pool, scenario)
    assert pool.keys_held == [1, 0] and served(engines[0]) == ["anonymous", "x1"]
    pool.forget("x")
    pool.forget("never-seen")
    assert pool.keys_held == [0, 0]


def test_no_engines_is_a_clear_error():
    with pytest.raises(ValueError, match="engine_urls is empty"):
        EnginePool([])


def test_a_dropped_engine_sends_the_request_to_another_and_moves_the_key(engines):
    e0, e1 = engines
    pool = EnginePool([e.url for e in engines])

    async def scenario():
        await pool.call("k", send("k1"))
        e0.stop()
        return await pool.call("k", send("k2"))

    answer = run(pool, scenario)
    assert answer["meta_info"]["id"] == "k2"
    assert served(e0) == ["k1"] and served(e1) == ["k2"]
    assert pool.engine_for("k") is pool.clients[1] and pool.keys_held == [0, 1]
    assert pool.roster.state(0) == "down" and pool.roster.failures == 1


def test_a_503_is_tried_on_another_engine(engines):
    e0, e1 = engines
    e0.status = 503
    pool = EnginePool([e.url for e in engines])
    run(pool, lambda: pool.call("k", send("k1")))
    assert served(e0) == [] and served(e1) == ["k1"]
    assert pool.roster.state(0) == "down" and pool.engine_for("k") is pool.clients[1]


def test_an_engine_back_with_old_weights_stays_out_until_they_are_published(engines):
    e0, e1 = engines
    for engine in engines:
        engine.version = "2"
    roster = EngineRoster([e.url for e in engines], published=2)
    pool = EnginePool(roster)

    async def scenario():
        e0.stop()
        await pool.call(None, send("while-down"))  # fails over to e1
        e0.version = "0"  # a restarted process serves the base model
        e0.start()
        # Requests keep coming (each start of a due probe rides on one); none may reach e0.
        count = 0
        while roster.needing_weights() != [e0.url]:
            count += 1
            await pool.call(None, send(f"after-{count}"))
            await asyncio.sleep(0.05)
            assert count < SETTLE_S / 0.05, "e0 never came back"
        assert not roster.usable(0) and roster.answering() == [e0.url, e1.url]
        await pool.call(None, send("still-e1"))
        e0.version = "2"  # what the controller's resync pushes
        roster.publish(2, [e0.url])
        return await pool.call(None, send("back"))  # all idle: the first engine again

    answer = run(pool, scenario)
    assert served(e0) == ["back"] and answer["meta_info"]["weight_version"] == "2"
    assert "still-e1" in served(e1) and roster.usable(1)


def test_a_stale_answer_is_asked_again_elsewhere_and_its_engine_set_aside(engines):
    e0, e1 = engines
    e0.version, e1.version = "1", "2"  # e0 missed the push of version 2 unnoticed
    roster = EngineRoster([e.url for e in engines], published=2)
    pool = EnginePool(roster)
    answer = run(pool, lambda: pool.call("k", send("k1")))
    assert answer["meta_info"]["weight_version"] == "2"
    assert served(e0) == ["k1"] and served(e1) == ["k1"]  # asked twice: e0's answer was thrown away
    assert roster.needing_weights() == [e0.url] and roster.failures == 1
    assert pool.engine_for("k") is pool.clients[1]


@pytest.mark.parametrize("engines", [1], indirect=True)
def test_a_request_waits_for_the_only_engine_to_come_back(engines):
    (engine,) = engines
    pool = EnginePool([engine.url], timeout=SETTLE_S)
    engine.stop()
    restart = threading.Timer(1.0, engine.start)

    async def scenario():
        restart.start()  # while the request is already failing and waiting
        return await pool.call("k", send("k1"))

    try:
        answer = run(pool, scenario)
    finally:
        restart.join()
    assert answer["meta_info"]["id"] == "k1" and engine.starts == 2 and served(engine) == ["k1"]
    assert pool.roster.failures >= 1 and pool.roster.usable(0)


def test_with_no_engine_ever_usable_the_request_fails_after_the_timeout_naming_each(engines):
    for engine in engines:
        engine.stop()
    urls = [e.url for e in engines]
    pool = EnginePool(urls, timeout=1.0)
    with pytest.raises(NoEngineAvailable) as raised:
        run(pool, lambda: pool.call("k", send("k1")))
    message = str(raised.value)
    assert "within the request timeout of 1 s" in message
    assert all(f"{url} (down)" in message for url in urls)


def test_a_request_waiting_for_an_engine_ends_once_the_roster_is_closed(engines):
    """Shutdown stops the engines: a request must not wait out its timeout for them."""
    for engine in engines:
        engine.stop()
    pool = EnginePool([e.url for e in engines], timeout=600.0)
    threading.Timer(0.5, pool.roster.close).start()
    started = time.monotonic()
    with pytest.raises(NoEngineAvailable, match="the engines were stopped"):
        run(pool, lambda: pool.call("k", send("k1")))
    assert time.monotonic() - started < 30


def test_an_engine_that_lacks_the_weights_is_named_so_when_nothing_is_usable(engines):
    e0, e1 = engines
    roster = EngineRoster([e.url for e in engines], published=3)
    roster.mark_lagging(0, 2)
    e1.stop()
    pool = EnginePool(roster, timeout=0.5)
    with pytest.raises(NoEngineAvailable, match=rf"{e0.url} \(lacks version 3\), {e1.url} \(down\)"):
        run(pool, lambda: pool.call(None, send("r")))
    assert served(e0) == []


def test_a_refusal_is_raised_not_tried_elsewhere(engines):
    e0, e1 = engines
    e0.status = 400
    pool = EnginePool([e.url for e in engines])
    with pytest.raises(EngineError) as raised:
        run(pool, lambda: pool.call("k", send("k1")))
    assert raised.value.status == 400 and "e0 answers 400" in raised.value.server_message
    assert served(e1) == [] and pool.roster.failures == 0 and pool.roster.usable(0)
    assert pool.in_flight == [0, 0]
