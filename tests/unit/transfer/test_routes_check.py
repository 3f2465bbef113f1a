"""Plan.check, the contract between planner, mesh and simulator: coverage of engines exactly
once, relays holding only the shares they forward, who may send and receive, cycles per bucket;
and plans as JSON and text."""

from __future__ import annotations

import pytest

from loongsage.transfer.routes import Endpoint, Plan, Route


def plan(routes: list[Route], relays: tuple[str, ...] = ("r1", "r2"), engines: tuple[str, ...] = ("e1",)) -> Plan:
    endpoints = [Endpoint("s1", "source", "h0", (0,)), Endpoint("s2", "source", "h0", (1,))]
    endpoints += [Endpoint(name, "relay", "h1", (0,)) for name in relays]
    endpoints += [Endpoint(name, "engine", "h1", (1,), url=f"http://{name}") for name in engines]
    return Plan({e.name: e for e in endpoints}, routes)


def route(sender: str, receiver: str, share: int = 0, shares: int = 1) -> Route:
    return Route(sender, receiver, "nccl", "rdma", share, shares)


def test_an_engine_covered_once_passes_whole_or_in_shares():
    plan([route("s1", "e1")], relays=()).check()
    plan([route("s1", "e1", 0, 2), route("s2", "e1", 1, 2)], relays=()).check()


@pytest.mark.parametrize(
    "routes, message",
    [
        ([], "e1 receives nothing: no route reaches it"),
        ([route("s1", "e1", 0, 2)], r"shares \[1\] of 2 reach it never"),
        ([route("s1", "e1"), route("s2", "e1")], r"shares \[0\] more than once"),
        ([route("s1", "e1", 0, 2), route("s2", "e1", 0, 3)], r"split \[2, 3\] ways"),
        ([route("s1", "e1"), route("e1", "e2")], "an engine cannot send"),
        ([route("s1", "e1"), route("s1", "s2")], "a source does not receive"),
    ],
)
def test_engine_coverage_and_roles_are_enforced(routes, message):
    with pytest.raises(ValueError, match=message):
        plan(routes, relays=(), engines=("e1", "e2")).check()


def test_unknown_endpoints_are_named():
    with pytest.raises(KeyError, match="no endpoint 'ghost'"):
        plan([route("s1", "e1"), route("ghost", "e1")], relays=()).check()


def test_shard_out_of_range_is_refused_at_construction():
    with pytest.raises(ValueError, match="shard 2 is not in 0..1"):
        Route("s1", "e1", "nccl", "rdma", 2, 2)


def test_relays_holding_a_share_forward_that_share_only():
    # two relays on a host each bring in half, both feed the engine
    halves = [route("s1", "r1", 0, 2), route("s2", "r2", 1, 2), route("r1", "e1", 0, 2), route("r2", "e1", 1, 2)]
    plan(halves).check()
    wrong = [route("s1", "r1", 0, 2), route("s2", "r2", 1, 2), route("r1", "e1", 1, 2), route("r2", "e1", 0, 2)]
    with pytest.raises(ValueError, match=r"r1 -> e1 forwards share 1/2, but r1 only receives shares \[0\] of 2"):
        plan(wrong).check()
    # a finer split of what it holds is fine (bucket b is in share b % 2 and in share b % 4)
    finer = [route("s1", "r1", 0, 2), route("r1", "e1", 0, 4), route("r1", "e1", 2, 4)]
    finer += [route("s2", "e1", 1, 4), route("s2", "e1", 3, 4)]
    plan(finer, relays=("r1",)).check()
    with pytest.raises(ValueError, match="forwards share 1/4"):
        plan([route("s1", "r1", 0, 2), route("r1", "e1", 1, 4)], relays=("r1",)).check()


def test_a_covered_relay_may_forward_any_share_and_an_idle_relay_must_still_receive():
    plan([route("s1", "r1"), route("r1", "e1", 0, 3), route("s1", "e1", 1, 3), route("s2", "e1", 2, 3)], relays=("r1",)).check()
    with pytest.raises(ValueError, match="r1 receives nothing"):
        plan([route("s1", "e1")], relays=("r1",)).check()
    with pytest.raises(ValueError, match=r"r1: shares \[0\] of 2 reach it more than once"):
        plan([route("s1", "r1", 0, 2), route("s2", "r1", 0, 2), route("s1", "e1")], relays=("r1",)).check()


def test_a_bucket_going_round_is_a_cycle_two_shares_crossing_are_not():
    looped = [route("r1", "r2"), route("r2", "r1"), route("s1", "e1")]  # each relay covered, by the other
    with pytest.raises(ValueError, match="routes form a cycle: r1 -> r2 -> r1"):
        plan(looped).check()
    # r1 passes share 0 to r2 and r2 passes share 1 to r1: each bucket still flows one way
    crossing = [route("s1", "r1", 0, 2), route("s2", "r2", 1, 2), route("r1", "r2", 0, 2), route("r2", "r1", 1, 2)]
    crossing += [route("r1", "e1", 0, 2), route("r2", "e1", 1, 2)]
    plan(crossing).check()
    same_share = [route("r1", "r2", 0, 2), route("r2", "r1", 0, 2), route("s2", "e1")]
    with pytest.raises(ValueError, match=r"cycle \(bucket 0 of every 2\)"):
        plan(same_share).check()


def test_plan_json_round_trip_and_render():
    original = plan([route("s1", "r1", 0, 2), route("s2", "r2", 1, 2), route("r1", "e1", 0, 2), route("r2", "e1", 1, 2)])
    original.notes.append("h1: 1 engine(s), no source: 2 relay(s)")
    again = Plan.from_dict(original.to_dict())
    assert again.endpoints == original.endpoints and again.routes == original.routes and again.notes == original.notes
    text = original.render()
    assert text.splitlines()[0] == "route plan: 2 source(s), 2 relay(s), 1 engine(s); routes: 4 nccl"
    assert "  engine e1 @ h1/gpu1: r1 --nccl[rdma]--> share 0/2; r2 --nccl[rdma]--> share 1/2" in text
    assert text.endswith("  note: h1: 1 engine(s), no source: 2 relay(s)")


def test_render_summarises_a_receiver_with_many_shares():
    names = tuple(f"r{i}" for i in range(8))
    routes = [route("s1", f"r{i}", i, 8) for i in range(8)] + [route(f"r{i}", "e1", i, 8) for i in range(8)]
    text = plan(routes, relays=names).render()
    assert "engine e1 @ h1/gpu1: 8 shares of 8 from 8 sender(s) (r0 .. r7): 8 nccl[rdma]" in text


def test_unknown_role_is_refused():
    with pytest.raises(ValueError, match="role 'trainer' is not one of"):
        Endpoint("x", "trainer", "h0")


def test_origin_follows_a_share_back_through_relays_to_its_source():
    routes = [route("s1", "r1", 0, 2), route("s2", "r2", 1, 2), route("r1", "r2", 0, 2), route("r2", "e1", 0, 2)]
    routes += [route("r2", "e1", 1, 2)]
    chained = plan(routes)
    chained.check()
    assert chained.origin(route("r2", "e1", 0, 2)) == route("s1", "r1", 0, 2)
    assert chained.origin(route("r2", "e1", 1, 2)) == route("s2", "r2", 1, 2)
    assert chained.origin(route("s1", "r1", 0, 2)) == route("s1", "r1", 0, 2)
    with pytest.raises(ValueError, match="r1: 0 routes bring it share 1/2"):
        chained.origin(route("r1", "e1", 1, 2))
