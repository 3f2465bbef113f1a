"""Route planner on recorded topologies (NVSwitch box, PCIe box, four DGX H100 nodes on
InfiniBand) and synthetic clusters: transports per receiver, relays, coverage, balance over the
sources' NICs, forced transports and receivers nothing reaches."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from loongsage.cluster.topology import gather, node_from_topo_text
from loongsage.transfer.planner import plan_routes
from loongsage.transfer.routes import Endpoint, Plan
from loongsage.transfer.topology_model import TopologyModel

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "topology"
IB = [f"dgx{i:02d}.cluster" for i in range(4)]


def box(name: str, hostname: str = "box") -> TopologyModel:
    return TopologyModel(gather([node_from_topo_text((FIXTURES / name).read_text(), hostname)]))


def ib_cluster() -> TopologyModel:
    return TopologyModel.from_json(FIXTURES / "dgx_h100_ib_4nodes.json")


def trainers(host: str, gpus, prefix: str = "trainer") -> list[Endpoint]:
    return [Endpoint(f"{prefix}/{host}/{g}", "source", host, (g,)) for g in gpus]


def engines(host: str, gpus, tp: int = 1) -> list[Endpoint]:
    gpus = list(gpus)
    groups = [tuple(gpus[i : i + tp]) for i in range(0, len(gpus), tp)]
    return [Endpoint(f"engine/{host}/{'-'.join(map(str, g))}", "engine", host, g) for g in groups]


def cpu_procs(host: str, n: int, role: str) -> list[Endpoint]:
    return [Endpoint(f"{role}/{host}/{i}", role, host) for i in range(n)]


def into(plan: Plan, name: str) -> list[tuple[str, str, str]]:
    return [(r.sender, r.transport, r.link) for r in plan.routes_into(name)]


def covered_once(plan: Plan, receiver: str) -> None:
    """Every bucket reaches the receiver exactly once (checked bucket by bucket over a period)."""
    routes = plan.routes_into(receiver)
    period = routes[0].shares
    assert sorted(sum(r.carries(b) for r in routes) for b in range(2 * period)) == [1] * (2 * period)


def port_loads(plan: Plan, topology: TopologyModel) -> tuple[Counter, Counter]:
    """Streams each NIC sends and takes in, from the resources each cross-host route occupies."""
    out, inn = Counter(), Counter()
    for route in plan.routes:
        if route.link in ("rdma", "tcp"):
            for name, _ in topology.resources(plan.endpoint(route.sender), plan.endpoint(route.receiver), route.link):
                if name.endswith(":out") and "gpu" not in name:
                    out[name] += 1
                if name.endswith(":in") and "gpu" not in name:
                    inn[name] += 1
    return out, inn


# ---------------------------------------------------------------- one host


def test_nvswitch_box_disaggregated_each_source_feeds_one_engine_over_nvlink():
    topology = box("dgx_h100_nvswitch.txt")
    plan = plan_routes(topology, trainers("box", range(4)), engines("box", range(4, 8)))
    assert plan.by_role("relay") == []
    assert {r.receiver: (r.transport, r.link, r.shares) for r in plan.routes} == {
        f"engine/box/{g}": ("cuda_ipc", "nvlink", 1) for g in range(4, 8)
    }
    assert Counter(r.sender for r in plan.routes) == {f"trainer/box/{g}": 1 for g in range(4)}
    assert plan.notes == ["box: 4 engine(s) fed from 4 local source(s): 4 cuda_ipc[nvlink]"]


def test_colocated_engines_read_their_own_gpu():
    topology = box("dgx_h100_nvswitch.txt")
    plan = plan_routes(topology, trainers("box", range(8)), engines("box", range(8)))
    for g in range(8):
        assert into(plan, f"engine/box/{g}") == [(f"trainer/box/{g}", "cuda_ipc", "same_device")]


def test_colocated_tensor_parallel_engine_reads_the_replica_on_each_of_its_gpus():
    topology = box("dgx_h100_nvswitch.txt")
    plan = plan_routes(topology, trainers("box", range(8)), engines("box", range(8), tp=2))
    assert into(plan, "engine/box/2-3") == [("trainer/box/2", "cuda_ipc", "same_device")]
    route = plan.routes_into("engine/box/2-3")[0]
    resources = topology.resources(plan.endpoint(route.sender), plan.endpoint("engine/box/2-3"), route.link)
    assert resources == [("box/gpu2:hbm", 2400.0), ("box/gpu3:hbm", 2400.0)]  # no GPU reads another's memory
    assert "box: engine/box/2-3 reads the replica on each of its 2 GPUs" in plan.notes
    # a replica on only one of its GPUs: the other rank reads it over NVLink
    plan = plan_routes(topology, trainers("box", [0, 2]), engines("box", [0, 1], tp=2))
    assert into(plan, "engine/box/0-1") == [("trainer/box/0", "cuda_ipc", "nvlink")]


def test_pcie_box_uses_p2p_then_nccl_then_shm_as_transports_are_taken_away():
    topology = box("pcie_l40s_8gpu_ansi.txt")
    src, dst = trainers("box", [0]), engines("box", range(1, 8))
    for allowed, expected in [
        (None, ("cuda_ipc", "pcie")),
        ({"nccl", "shm", "gloo"}, ("nccl", "pcie")),
        ({"shm", "gloo", "inline"}, ("shm", "host_shm")),
        ({"gloo"}, ("gloo", "tcp")),
        ({"inline"}, ("inline", "tcp")),
    ]:
        plan = plan_routes(topology, src, dst, allowed)
        assert {(r.transport, r.link) for r in plan.routes} == {expected}, allowed
        assert len(plan.routes) == 7


def test_cpu_processes_on_one_host_get_shm():
    topology = TopologyModel.synthetic(1, gpus_per_node=0)
    plan = plan_routes(topology, cpu_procs("node0", 2, "source"), cpu_procs("node0", 4, "engine"))
    assert plan.transports() == Counter({"shm": 4})
    assert Counter(r.sender for r in plan.routes) == {"source/node0/0": 2, "source/node0/1": 2}


def test_a_cpu_engine_next_to_gpu_sources_gets_shm():
    topology = box("dgx_h100_nvswitch.txt")
    plan = plan_routes(topology, trainers("box", [0]), [Endpoint("cpu-engine", "engine", "box")])
    assert into(plan, "cpu-engine") == [("trainer/box/0", "shm", "host_shm")]


# ---------------------------------------------------------------- several hosts (recorded InfiniBand cluster)


def test_ib_cluster_relays_one_per_compute_nic_and_shares_from_every_source():
    topology = ib_cluster()
    sources = trainers(IB[0], range(8))
    plan = plan_routes(topology, sources, [e for host in IB[1:] for e in engines(host, range(8))])
    relays = plan.by_role("relay")
    assert len(relays) == 24
    for host in IB[1:]:
        here = [r for r in relays if r.host == host]
        assert [r.name for r in here] == [f"relay/{host}/{i}" for i in range(8)]
        assert [r.gpus for r in here] == [(g,) for g in range(8)]  # the GPU behind each compute NIC
        for relay in here:  # each relay takes in exactly its share over the network
            taken = [r for r in plan.routes_into(relay.name) if r.link == "rdma"]
            assert [(r.transport, r.share, r.shares) for r in taken] == [("nccl", int(relay.name[-1]), 8)]
    for engine in plan.by_role("engine"):
        routes = plan.routes_into(engine.name)
        assert len(routes) == 8 and {r.sender.split("/")[1] for r in routes} == {engine.host}
        # its own GPU's relay, then NVLink; on a host inner in a share's tree that relay holds two
        links = Counter(r.link for r in routes)
        assert set(links) == {"nvlink", "same_device"} and 1 <= links["same_device"] <= 2
        assert {r.transport for r in routes} == {"cuda_ipc"}
        covered_once(plan, engine.name)
    # every source sends one share: no single NIC carries everything
    from_sources = [r for r in plan.routes if r.sender.startswith("trainer/")]
    assert Counter(r.sender for r in from_sources) == {s.name: 1 for s in sources}
    out, inn = port_loads(plan, topology)
    assert max(out.values()) == 1 and max(inn.values()) == 1
    # the storage NICs (mlx5_1, mlx5_2: no GPU behind their switch) stay idle
    assert not [name for name in out | inn if name.split("/")[1] in ("mlx5_1:out", "mlx5_1:in", "mlx5_2:out", "mlx5_2:in")]
    assert "dgx01.cluster: 8 engine(s), no source: 8 relay(s), one per NIC (mlx5_0, mlx5_3," in plan.notes[0]
    assert plan.notes[-1].startswith("between hosts: 8 share(s), one tree each; 8 stream(s) from the sources over 8 port(s)")


def test_ib_cluster_one_engine_on_a_host_with_eight_nics_still_gets_relays():
    """Eight NICs bring the weights in eight times faster than the engine's own; NVLink spreads them."""
    topology = ib_cluster()
    plan = plan_routes(topology, trainers(IB[0], range(8)), engines(IB[1], [3]))
    assert len(plan.by_role("relay")) == 8
    assert Counter(r.link for r in plan.routes_into(f"engine/{IB[1]}/3")) == {"nvlink": 7, "same_device": 1}


def test_ib_cluster_tensor_parallel_engines_and_a_colocated_host():
    topology = ib_cluster()
    sources = trainers(IB[0], range(8))
    plan = plan_routes(topology, sources, engines(IB[0], range(8), tp=4) + engines(IB[1], range(8), tp=4))
    assert {r.link for r in plan.routes_into(f"engine/{IB[0]}/0-1-2-3")} == {"same_device"}
    assert len(plan.routes_into(f"engine/{IB[0]}/0-1-2-3")) == 1  # a full copy from a local source
    assert len(plan.routes_into(f"engine/{IB[1]}/4-5-6-7")) == 8  # a share from each relay
    assert len([r for r in plan.by_role("relay") if r.host == IB[1]]) == 8


def test_sources_on_two_hosts_start_twice_as_many_trees():
    topology = ib_cluster()
    sources = trainers(IB[0], range(8)) + trainers(IB[1], range(8))
    plan = plan_routes(topology, sources, [e for host in IB[2:] for e in engines(host, range(8))])
    from_sources = Counter(r.sender for r in plan.routes if r.sender.startswith("trainer/"))
    assert len(from_sources) == 16 and set(from_sources.values()) == {1}
    assert not [r for r in plan.routes if r.sender.startswith("relay/") and r.link == "rdma"]  # two hosts, sixteen roots


def test_a_host_without_rdma_gets_one_relay_over_tcp():
    text = (FIXTURES / "dgx_h100_nvswitch.txt").read_text()
    cluster = TopologyModel.from_json(FIXTURES / "dgx_h100_ib_4nodes.json").cluster
    plain = node_from_topo_text(text, "plain")  # no NICs in sysfs: TCP only
    topology = TopologyModel(gather([cluster.nodes[0], plain]))
    plan = plan_routes(topology, trainers(IB[0], range(8)), engines("plain", range(8)))
    assert [r.name for r in plan.by_role("relay")] == ["relay/plain/0"]
    assert {(r.transport, r.link) for r in plan.routes_into("relay/plain/0")} == {("nccl", "tcp")}
    assert "one for the TCP port" in plan.notes[0]


# ---------------------------------------------------------------- CPU hosts


def test_cpu_hosts_one_relay_over_gloo_then_shm():
    topology = TopologyModel.synthetic(2, gpus_per_node=0)
    plan = plan_routes(topology, cpu_procs("node0", 1, "source"), cpu_procs("node1", 3, "engine"))
    assert [r.name for r in plan.by_role("relay")] == ["relay/node1/0"]
    assert plan.endpoint("relay/node1/0").gpus == ()
    assert into(plan, "relay/node1/0") == [("source/node0/0", "gloo", "tcp")]
    assert {tuple(into(plan, f"engine/node1/{i}")) for i in range(3)} == {(("relay/node1/0", "shm", "host_shm"),)}
    assert plan.notes[0] == "node1: 3 engine(s), no source: 1 relay(s), a CPU process for the TCP port; fan-out shm[host_shm]"


def test_a_lone_cpu_engine_gets_a_direct_route_unless_many_hosts_wait():
    topology = TopologyModel.synthetic(2, gpus_per_node=0)
    plan = plan_routes(topology, cpu_procs("node0", 1, "source"), cpu_procs("node1", 1, "engine"))
    assert plan.by_role("relay") == [] and into(plan, "engine/node1/0") == [("source/node0/0", "gloo", "tcp")]
    assert plan.notes[0] == "node1: 1 engine(s), no source, one NIC: direct routes (a relay would add a hop and no bandwidth)"
    # six hosts, one TCP port at the source: relays pass the weights on instead of a star from one port
    topology = TopologyModel.synthetic(7, gpus_per_node=0)
    receivers = [e for h in range(1, 7) for e in cpu_procs(f"node{h}", 1, "engine")]
    plan = plan_routes(topology, cpu_procs("node0", 1, "source"), receivers)
    assert len(plan.by_role("relay")) == 6
    out, inn = port_loads(plan, topology)
    assert max(out.values()) == 1 and max(inn.values()) == 1
    assert "to pass the weights on (more hosts than source ports)" in plan.notes[0]


def test_cpu_hosts_with_only_inline_allowed_get_direct_http():
    topology = TopologyModel.synthetic(2, gpus_per_node=0)
    plan = plan_routes(topology, cpu_procs("node0", 1, "source"), cpu_procs("node1", 3, "engine"), {"inline"})
    assert plan.by_role("relay") == [] and plan.transports() == Counter({"inline": 3})
    assert "no allowed transport reaches a relay" in plan.notes[0]


# ---------------------------------------------------------------- forced transports and errors


def test_forcing_nccl_gives_a_plan_with_nccl_only():
    topology = ib_cluster()
    plan = plan_routes(topology, trainers(IB[0], range(4)), engines(IB[0], range(4, 8)) + engines(IB[1], range(8)), {"nccl"})
    assert set(plan.transports()) == {"nccl"}
    assert {r.link for r in plan.routes_into(f"engine/{IB[0]}/5")} == {"nvlink"}


def test_a_receiver_nothing_allowed_reaches_is_named():
    topology = ib_cluster()
    with pytest.raises(ValueError, match=r"engine engine/dgx01.cluster/0 @ dgx01.cluster/gpu0: no allowed transport.*nccl, gloo"):
        plan_routes(topology, trainers(IB[0], range(8)), engines(IB[1], range(8)), {"cuda_ipc"})
    cpus = TopologyModel.synthetic(2, gpus_per_node=0)
    with pytest.raises(ValueError, match=r"engine/node1/0 @ node1/cpu: no allowed transport .*allowed: shm;"):
        plan_routes(cpus, cpu_procs("node0", 1, "source"), cpu_procs("node1", 1, "engine"), {"shm"})
    with pytest.raises(ValueError, match="unknown transport\\(s\\) rdma"):
        plan_routes(cpus, cpu_procs("node0", 1, "source"), cpu_procs("node1", 1, "engine"), {"rdma"})


def test_bad_inputs_are_refused_with_the_reason():
    topology = box("dgx_h100_nvswitch.txt")
    with pytest.raises(ValueError, match="at least one source"):
        plan_routes(topology, [], engines("box", [0]))
    with pytest.raises(ValueError, match="engine/box/0: passed as sources"):
        plan_routes(topology, engines("box", [0]), engines("box", [1]))
    with pytest.raises(ValueError, match="names used twice: x"):
        plan_routes(topology, [Endpoint("x", "source", "box", (0,))], [Endpoint("x", "engine", "box", (1,))])
    with pytest.raises(ValueError, match="no node 'elsewhere'"):
        plan_routes(topology, trainers("box", [0]), engines("elsewhere", [0]))
    with pytest.raises(ValueError, match="has no GPU 9"):
        plan_routes(topology, trainers("box", [0]), engines("box", [9]))


def test_no_engines_is_an_empty_plan():
    plan = plan_routes(box("dgx_h100_nvswitch.txt"), trainers("box", [0]), [])
    assert plan.routes == [] and list(plan.endpoints) == ["trainer/box/0"]


# ---------------------------------------------------------------- cluster scale (synthetic)


def test_64_nodes_every_nic_sends_and_takes_one_stream_and_trees_stay_shallow():
    topology = TopologyModel.synthetic(64)
    sources = trainers("node0", range(8))
    plan = plan_routes(topology, sources, [e for h in range(1, 64) for e in engines(f"node{h}", range(8))])
    assert len(plan.by_role("relay")) == 63 * 8 and len(plan.by_role("engine")) == 63 * 8
    out, inn = port_loads(plan, topology)
    assert max(out.values()) == 1 and max(inn.values()) == 1 and sum(inn.values()) == 63 * 8
    for engine in plan.by_role("engine")[::37]:
        covered_once(plan, engine.name)
    hops = int(plan.notes[-1].split("deepest relay ")[1].split(" ")[0])
    assert hops <= 6  # a chain through 63 hosts would be 63


def test_hosts_with_fewer_nics_hold_several_shares_per_relay():
    big = TopologyModel.synthetic(2).cluster.nodes
    small = TopologyModel.synthetic(1, nics_per_node=2, host_prefix="small").cluster.nodes
    topology = TopologyModel(gather(big + small))
    plan = plan_routes(topology, trainers("node0", range(8)), engines("node1", range(8)) + engines("small0", range(8)))
    assert len([r for r in plan.by_role("relay") if r.host == "small0"]) == 2
    held = {r.share for r in plan.routes_into("relay/small0/1")}
    assert held == {1, 3, 5, 7}
    for engine in plan.by_role("engine"):
        covered_once(plan, engine.name)


def test_plans_are_data_json_round_trip_and_render():
    topology = ib_cluster()
    plan = plan_routes(topology, trainers(IB[0], range(8)), engines(IB[1], range(8)))
    again = Plan.from_dict(plan.to_dict())
    assert again.routes == plan.routes and again.endpoints == plan.endpoints and again.notes == plan.notes
    text = plan.render()
    assert text.startswith("route plan: 8 source(s), 8 relay(s), 8 engine(s); routes: 64 cuda_ipc, 8 nccl")
    assert f"relay relay/{IB[1]}/0 @ {IB[1]}/gpu0: trainer/{IB[0]}/0 --nccl[rdma]--> share 0/8" in text
    assert "8 shares of 8 from 8 sender(s)" in text and "1 cuda_ipc[same_device], 7 cuda_ipc[nvlink]" in text


def test_every_engine_share_traces_back_to_a_source():
    """What a mesh that does not run relays yet sends: each engine's shares straight from their sources."""
    topology = TopologyModel.synthetic(6)
    plan = plan_routes(topology, trainers("node0", range(8)), [e for h in range(1, 6) for e in engines(f"node{h}", range(8))])
    assert [r for r in plan.routes if r.sender.startswith("relay/") and r.receiver.startswith("relay/") and r.link == "rdma"]
    for engine in plan.by_role("engine"):
        origins = [plan.origin(r) for r in plan.routes_into(engine.name)]
        assert {o.sender.split("/")[0] for o in origins} == {"trainer"}
        assert sorted(o.share for o in origins) == list(range(8))
