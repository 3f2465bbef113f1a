"""The transfer simulator: hand-computable cases on a hand-built fabric, then the three strategies
and the bound on synthetic clusters through the real planner."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from loongsage.bench.flow_events import Flow, max_min_rates, run_flows
from loongsage.bench.transfer_simulation import (
    GB,
    MODELS,
    NCCL_RING_BASE_LAT_S,
    NCCL_RING_STEP_LAT_S,
    SEED_BUCKET_BYTES,
    busiest_resources,
    compare,
    layout_endpoints,
    lower_bound,
    plan_flows,
    seed_nccl_seconds,
    simulate_plan,
)
from loongsage.transfer.routes import Endpoint, Plan, Route


@dataclass(frozen=True)
class Spec:
    gbps: float
    latency_s: float


class Fabric:
    """Every endpoint has one port with `gbps` each way; a hop occupies the sender's out side and
    the receiver's in side. Copies inside a GPU are free (so the engines' load costs nothing)."""

    def __init__(self, gbps: float = 10.0, latency_s: float = 1e-3, ports: dict[str, float] | None = None):
        self.gbps, self.latency_s, self.ports = gbps, latency_s, ports or {}

    def resources(self, sender: Endpoint, receiver: Endpoint, link: str | None = None) -> list[tuple[str, float]]:
        return [
            (f"{sender.name}:out", self.ports.get(sender.name, self.gbps)),
            (f"{receiver.name}:in", self.ports.get(receiver.name, self.gbps)),
        ]

    def link_spec(self, cls: str) -> Spec:
        return Spec(1e12, 0.0) if cls == "same_device" else Spec(self.gbps, self.latency_s)


def source(name: str, host: str = "h0") -> Endpoint:
    return Endpoint(name, "source", host, (0,))


def engine(name: str, host: str = "h1") -> Endpoint:
    return Endpoint(name, "engine", host, (0,))


def relay(name: str, host: str = "h2") -> Endpoint:
    return Endpoint(name, "relay", host, (0,))


def plan_of(endpoints: list[Endpoint], routes: list[Route]) -> Plan:
    return Plan({e.name: e for e in endpoints}, routes)


M = 10 * GB  # model bytes
BUCKET = 0.1 * GB  # 100 buckets


def test_one_link_takes_bytes_over_bandwidth_plus_latency():
    result = run_flows([Flow("a", 10.0, 10, (("nic", 50.0),), latency=1e-3)])
    assert result.seconds == pytest.approx(10 / 50 + 1e-3)
    plan = plan_of([source("s"), engine("e")], [Route("s", "e", "nccl", "rdma")])
    assert simulate_plan(plan, Fabric(), M, BUCKET).seconds == pytest.approx(10 / 10 + 1e-3)


def test_two_flows_sharing_a_nic_take_twice_as_long():
    one = plan_of([source("s"), engine("e1")], [Route("s", "e1", "nccl", "rdma")])
    two = plan_of(
        [source("s"), engine("e1"), engine("e2", "h2")], [Route("s", "e1", "nccl", "rdma"), Route("s", "e2", "nccl", "rdma")]
    )
    t1 = simulate_plan(one, Fabric(latency_s=0.0), M, BUCKET).seconds
    t2 = simulate_plan(two, Fabric(latency_s=0.0), M, BUCKET).seconds
    assert t1 == pytest.approx(1.0)
    assert t2 == pytest.approx(2.0)


def test_max_min_gives_the_unconstrained_flow_what_the_narrow_one_leaves():
    # flows a and b share r0 (10 GB/s); a also crosses r1 (2 GB/s): a = 2, b = 8
    rates = max_min_rates(
        np.array([True, True]),
        np.array([math.inf, math.inf]),
        np.array([0, 0, 1]),
        np.array([0, 1, 0]),
        np.array([10.0, 2.0]),
    )
    assert rates == pytest.approx([2.0, 8.0])


def test_a_relay_chain_pipelines_buckets_instead_of_storing_the_whole_model():
    plan = plan_of(
        [source("s"), relay("r"), engine("e")],
        [Route("s", "r", "nccl", "rdma"), Route("r", "e", "nccl", "rdma")],
    )
    seconds = simulate_plan(plan, Fabric(), M, BUCKET).seconds
    # M / bw, plus one bucket's time and one latency per extra hop, plus the last hop's latency
    assert seconds == pytest.approx(10 / 10 + 0.1 / 10 + 2 * 1e-3)
    assert seconds < 1.1 < 2 * 10 / 10  # store and forward of the whole model would take 2 M / bw


def test_a_slow_relay_sets_the_pace_of_everything_after_it():
    plan = plan_of(
        [source("s"), relay("r"), engine("e")],
        [Route("s", "r", "nccl", "rdma"), Route("r", "e", "nccl", "rdma")],
    )
    seconds = simulate_plan(plan, Fabric(latency_s=0.0, ports={"r": 5.0}), M, BUCKET).seconds
    assert seconds == pytest.approx(10 / 5 + 0.1 / 5)


def test_an_engine_fed_two_shares_waits_for_the_slower():
    plan = plan_of(
        [source("a"), source("b", "h3"), engine("e")],
        [Route("a", "e", "nccl", "rdma", 0, 2), Route("b", "e", "nccl", "rdma", 1, 2)],
    )
    # each share is 5 GB; a's port runs at 10 GB/s, b's at 2.5; the engine port (20) is not the limit
    seconds = simulate_plan(plan, Fabric(latency_s=0.0, ports={"b": 2.5, "e": 20.0}), M, BUCKET).seconds
    assert seconds == pytest.approx(5 / 2.5)
    flows = plan_flows(plan, Fabric(ports={"b": 2.5, "e": 20.0}), M, BUCKET)
    assert busiest_resources(flows, 1)[0] == ("b:out", pytest.approx(2.0))


def test_routes_that_pass_a_share_around_a_cycle_are_refused():
    plan = plan_of(
        [source("s"), relay("r1"), relay("r2", "h3"), engine("e")],
        [Route("s", "r1", "nccl", "rdma"), Route("r1", "e", "nccl", "rdma"), Route("r2", "r1", "nccl", "rdma")],
    )
    with pytest.raises(ValueError):  # r2 forwards what it never received (check) or a cycle
        plan_flows(plan, Fabric(), M, BUCKET)


# -------------------------------------------------------------- synthetic clusters, real planner

topology_model = pytest.importorskip("loongsage.transfer.topology_model")
TopologyModel = topology_model.TopologyModel


@pytest.mark.parametrize("layout", ["disaggregated", "colocated"])
@pytest.mark.parametrize("model", ["7B", "70B"])
def test_the_bound_never_exceeds_any_strategy(model, layout):
    topology = TopologyModel.synthetic(4)
    sources, engines = layout_endpoints(topology, layout, MODELS[model])
    result = compare(topology, sources, engines, MODELS[model].bytes)
    bound = result.bound.seconds
    assert bound > 0
    for seconds in (result.seed_s, result.flat_s, result.plan_s):
        assert seconds >= bound * (1 - 1e-9)


def test_bound_terms_on_two_hosts():
    topology = TopologyModel.synthetic(2)
    sources, engines = layout_endpoints(topology, "disaggregated", MODELS["70B"])
    bound = lower_bound(topology, sources, engines, 140 * GB)
    assert bound.terms["node_ingress"] == pytest.approx(140 / (8 * 50))  # 8 NDR NICs into the engine host
    assert bound.terms["source_egress"] == pytest.approx(140 / (8 * 50))  # and 8 out of the trainer host
    assert bound.terms["gpu_ingress"] == pytest.approx(140 / (450 + 64))  # NVLink in + PCIe in
    assert bound.seconds == pytest.approx(0.35)


def test_seed_is_nccls_ring_model_per_1gib_bucket():
    topology = TopologyModel.synthetic(2)
    sources, engines = layout_endpoints(topology, "disaggregated", MODELS["7B"])
    model_bytes = 3 * SEED_BUCKET_BYTES
    seed = seed_nccl_seconds(topology, sources, engines, model_bytes)
    b = SEED_BUCKET_BYTES / GB
    ranks = 1 + 8  # rank 0 and the engine host's 8 GPUs
    per_bucket = NCCL_RING_BASE_LAT_S + ranks * NCCL_RING_STEP_LAT_S["net"] + b / 50 + b / 2400
    assert seed.ring_gbps == 50  # rank 0 is alone on its host: one NIC
    assert seed.seconds == pytest.approx(3 * per_bucket)


def test_seed_at_64_hosts_70b_is_slower_than_the_plan_by_the_printed_ratio(capsys):
    from loongsage.bench import transfer_simulate

    row = transfer_simulate.run_config("70B", "disaggregated", 64, flat=False)
    assert row.speedup == pytest.approx(row.seed_s / row.plan_s)
    assert row.speedup >= transfer_simulate.TARGET_SPEEDUP
    lines = transfer_simulate.verdicts([row])
    assert any(f"plan {row.speedup:.2f}x faster" in line and "reached" in line for line in lines)


def test_bench_prints_a_row_per_configuration_and_the_verdicts(capsys):
    from loongsage.bench import transfer_simulate

    argv = ["--nodes", "2", "--models", "7B", "--layouts", "disaggregated,colocated", "--no-extra", "--no-flat"]
    assert transfer_simulate.main(argv) == 0
    out = capsys.readouterr().out
    assert "disaggregated" in out and "colocated" in out
    assert "plan within 1.2x of the bound everywhere" in out


def rail_chain_plan(topology, sources, engines, shares: int = 8) -> Plan:
    """Share s rides NIC s of every host: each trainer host starts one chain per share, and each
    engine host's relay on GPU s passes share s to the next host of its chain and to its engines."""
    hosts = topology.hosts()
    trainer_hosts = list(dict.fromkeys(s.host for s in sources))
    serving = [h for h in hosts if h not in trainer_hosts]
    endpoints = {e.name: e for e in (*sources, *engines)}
    routes = []
    for t, host in enumerate(trainer_hosts):
        for s in range(shares):
            previous = f"trainer/{host}/{s}"
            for h in serving[t :: len(trainer_hosts)]:
                relay = Endpoint(f"relay/{h}/{s}", "relay", h, (s,))
                endpoints[relay.name] = relay
                routes.append(Route(previous, relay.name, "nccl", "rdma", s, shares))
                for e in (e for e in engines if e.host == h):
                    routes.append(Route(relay.name, e.name, "cuda_ipc", "same_device" if e.gpus == (s,) else "nvlink", s, shares))
                previous = relay.name
    return Plan(endpoints, routes)


@pytest.mark.parametrize("model", ["7B", "70B"])
def test_the_bound_is_tight_a_rail_aligned_chain_plan_comes_within_5_percent(model):
    topology = TopologyModel.synthetic(16)
    sources, engines = layout_endpoints(topology, "disaggregated", MODELS[model])
    plan = rail_chain_plan(topology, sources, engines)
    result = compare(topology, sources, engines, MODELS[model].bytes, plan=plan, flat=False)
    assert result.bound.term == "node_ingress"
    assert result.plan_s / result.bound.seconds < 1.05
