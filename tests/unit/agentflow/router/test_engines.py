"""Engine choice: a trajectory sticks to its engine; a new one goes to the least-loaded."""

from __future__ import annotations

import asyncio

import pytest

from loongsage.agentflow.router.engines import EnginePool

URLS = ("http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3")


def test_trajectories_stick_and_new_ones_go_to_the_least_loaded():
    pool = EnginePool(URLS)

    async def scenario():
        async with pool.engine_for("a") as first:
            async with pool.engine_for("b") as second:
                async with pool.engine_for("a") as again:
                    assert again is first and pool.in_flight[0] == 2
                async with pool.engine_for("c") as third:
                    # engines 0 and 1 are busy: "c" goes to the idle one
                    assert {first, second, third} == set(pool.clients)
        assert pool.in_flight == [0, 0, 0]
        assert pool.trajectories == [1, 1, 1]
        async with pool.engine_for("d") as fourth:  # all idle, equally used: the first
            assert fourth is pool.clients[0]
        async with pool.engine_for("b") as back:
            assert back is second

    asyncio.run(scenario())
    assert sorted(pool.trajectories) == [1, 1, 2]


def test_anonymous_requests_are_not_remembered_and_forget_frees_a_slot():
    pool = EnginePool(URLS[:2])

    async def scenario():
        async with pool.engine_for(None):
            pass
        async with pool.engine_for("x") as engine:
            return engine

    engine = asyncio.run(scenario())
    assert pool.trajectories == [1, 0] and engine is pool.clients[0]
    pool.forget("x")
    assert pool.trajectories == [0, 0]


def test_no_engines_is_a_clear_error():
    with pytest.raises(ValueError, match="engine_urls is empty"):
        EnginePool([])
