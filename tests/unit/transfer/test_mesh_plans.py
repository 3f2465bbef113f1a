"""The transport registry and the sender's handling of plans (pure: no engine)."""

from __future__ import annotations

import pytest
import torch

from loongsage.transfer.buckets import share_buckets
from loongsage.transfer.channel import TRANSPORTS, Transport, get_transport, register_transport
from loongsage.transfer.endpoints import SOURCE
from loongsage.transfer.plan_edits import engines_behind, without_relays
from loongsage.transfer.rounds import execute_plan
from loongsage.transfer.routes import Endpoint, Plan, Route
from loongsage.transfer.source_routes import route_groups, share_maker


def test_every_transport_is_registered_once_and_a_second_registration_is_refused():
    assert sorted(TRANSPORTS) == ["cuda_ipc", "gloo", "inline", "nccl", "shm"]
    assert [name for name, t in TRANSPORTS.items() if t.same_host_only] == ["shm", "cuda_ipc"]
    assert get_transport("nccl").needs_gpu and not get_transport("gloo").needs_gpu
    with pytest.raises(ValueError, match="transport 'shm' is registered already"):
        register_transport(Transport("shm", lambda clients, host: None, same_host_only=True, bucket_mb=1))
    with pytest.raises(ValueError, match=r"'ucx' is unknown; expected one of \['cuda_ipc', 'gloo', 'inline', 'nccl', 'shm'\]"):
        get_transport("ucx")


def relayed_plan() -> Plan:
    """node2 has no source: one relay takes the weights over gloo and fans out over shm."""
    endpoints = [
        Endpoint(SOURCE, "source", "node1"),
        Endpoint("relay/node2/0", "relay", "node2"),
        Endpoint("engine/0", "engine", "node1", url="http://node1:1"),
        Endpoint("engine/1", "engine", "node2", url="http://node2:1"),
        Endpoint("engine/2", "engine", "node2", url="http://node2:2"),
    ]
    routes = [
        Route(SOURCE, "engine/0", "shm", "host_shm"),
        Route(SOURCE, "relay/node2/0", "gloo", "tcp"),
        Route("relay/node2/0", "engine/1", "shm", "host_shm"),
        Route("relay/node2/0", "engine/2", "shm", "host_shm"),
    ]
    return Plan({e.name: e for e in endpoints}, routes)


def test_without_relays_sends_what_a_relay_would_forward_straight_from_its_sender():
    plan = relayed_plan()
    plan.check()
    flat = without_relays(plan)
    flat.check()
    assert flat.by_role("relay") == []
    assert sorted((r.receiver, r.transport, r.link) for r in flat.routes) == [
        ("engine/0", "shm", "host_shm"),
        ("engine/1", "gloo", "tcp"),
        ("engine/2", "gloo", "tcp"),
    ]
    assert "without its 1 relay(s)" in flat.notes[-1]


def test_a_push_to_an_engine_the_plan_does_not_cover_names_it():
    with pytest.raises(ValueError, match=r"no route to http://elsewhere:1; it covers http://node1:1, http://node2:1"):
        execute_plan(without_relays(relayed_plan()), SOURCE, [], ["http://elsewhere:1"], 1, "node1")


def test_routes_out_of_a_source_group_by_transport_and_share_and_a_share_is_every_sth_bucket():
    endpoints = [
        Endpoint(SOURCE, "source", "a"),
        *[Endpoint(f"engine/{i}", "engine", "b", url=f"http://b:{i}") for i in range(2)],
    ]
    routes = [Route(SOURCE, f"engine/{i}", "gloo", "tcp", share, 2) for i in range(2) for share in range(2)]
    plan = Plan({e.name: e for e in endpoints}, routes)
    plan.check()
    assert route_groups(plan, SOURCE, ["http://b:0", "http://b:1"]) == {
        ("gloo", 0, 2): ["http://b:0", "http://b:1"],
        ("gloo", 1, 2): ["http://b:0", "http://b:1"],
    }
    assert route_groups(plan, SOURCE, ["http://b:1"]) == {("gloo", 0, 2): ["http://b:1"], ("gloo", 1, 2): ["http://b:1"]}
    named = [(f"t{i}", torch.zeros(4)) for i in range(5)]  # 16 bytes each, one a bucket
    kept, count = share_buckets(iter(named), 16, [(0, 2), (1, 2)])
    assert count == 5 and sorted(kept) == [0, 1, 2, 3, 4]
    shares = [[n for bucket in share_maker(kept, share, 2)() for n, _ in bucket] for share in range(2)]
    assert shares == [["t0", "t2", "t4"], ["t1", "t3"]]


def test_a_source_keeps_only_the_buckets_of_its_shares_but_reads_every_tensor():
    read = []

    def stream():
        for i in range(6):
            read.append(f"t{i}")
            yield f"t{i}", torch.full((4,), float(i))  # 16 bytes: one bucket each

    kept, count = share_buckets(stream(), 16, [(1, 3)])
    assert read == [f"t{i}" for i in range(6)] and count == 6
    assert {index: [n for n, _ in bucket] for index, bucket in kept.items()} == {1: ["t1"], 4: ["t4"]}
    kept, count = share_buckets(iter([]), 16, [])
    assert (kept, count) == ({}, 0)


def test_a_chain_of_relays_flattens_to_the_sources_route_and_a_relay_answers_for_everything_downstream():
    endpoints = [
        Endpoint(SOURCE, "source", "node1"),
        Endpoint("relay/node2/0", "relay", "node2"),
        Endpoint("relay/node3/0", "relay", "node3"),
        Endpoint("engine/0", "engine", "node2", url="http://node2:1"),
        Endpoint("engine/1", "engine", "node3", url="http://node3:1"),
        Endpoint("engine/2", "engine", "node3", url="http://node3:2"),
    ]
    routes = [
        Route(SOURCE, "relay/node2/0", "gloo", "tcp"),
        Route("relay/node2/0", "engine/0", "shm", "host_shm"),
        Route("relay/node2/0", "relay/node3/0", "gloo", "tcp"),
        Route("relay/node3/0", "engine/1", "shm", "host_shm"),
        Route("relay/node3/0", "engine/2", "shm", "host_shm"),
    ]
    plan = Plan({e.name: e for e in endpoints}, routes)
    plan.check()
    assert engines_behind(plan, "relay/node2/0") == ["http://node2:1", "http://node3:1", "http://node3:2"]
    assert engines_behind(plan, "relay/node3/0") == ["http://node3:1", "http://node3:2"]
    flat = without_relays(plan)
    flat.check()
    assert sorted((r.sender, r.receiver, r.transport) for r in flat.routes) == [
        (SOURCE, "engine/0", "gloo"),
        (SOURCE, "engine/1", "gloo"),
        (SOURCE, "engine/2", "gloo"),
    ]
