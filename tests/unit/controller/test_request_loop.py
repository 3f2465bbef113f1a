"""The rollout's shared event loop: a caller never waits forever on a loop that was closed."""

import asyncio
import threading

import pytest

from loongsage.controller.request_loop import RequestLoop, RequestLoopClosed


def test_run_returns_the_coroutines_result_from_any_thread():
    loop = RequestLoop("test-requests")
    results = []

    async def double(x):
        await asyncio.sleep(0.01)
        return 2 * x

    threads = [threading.Thread(target=lambda i=i: results.append(loop.run(double(i)))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    loop.close()
    assert sorted(results) == [0, 2, 4, 6]


def test_close_cancels_a_request_still_running_and_its_caller_gets_an_error():
    loop = RequestLoop("test-requests")
    waiting = threading.Event()
    outcome = []

    async def response_that_never_comes():  # an engine that went away mid-request
        waiting.set()
        await asyncio.Event().wait()

    def caller():
        try:
            loop.run(response_that_never_comes())
        except RequestLoopClosed as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=caller)
    thread.start()
    assert waiting.wait(5)
    closed = []

    async def close_pools():
        closed.append(True)

    loop.close(last=close_pools())
    thread.join(5)
    assert not thread.is_alive()
    assert outcome == ["test-requests closed while the request was running"]
    assert closed == [True]


def test_run_after_close_fails_by_name_and_close_twice_is_harmless():
    loop = RequestLoop("test-requests")
    loop.close()

    async def anything():
        return 1

    with pytest.raises(RequestLoopClosed, match="test-requests is closed"):
        loop.run(anything())
    loop.close()
