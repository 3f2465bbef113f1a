"""The route plan of the run's weight pushes (TransferMesh), made once the trainer and the
engines are placed: every trainer rank that holds a full replica once the weights are gathered
(all of them under FSDP, the first rank of each replica under Megatron) is a source, every
engine a receiver; the topology is probed on every Ray node. `trainer.weight_sync=mesh` lets the planner choose per engine; a
transport name restricts it to that one (and fails naming an engine it cannot reach). The
relays the plan has are started as Ray actors on their nodes (`transfer.relay`). The plan is
printed, and kept in the run dir as transfer_plan.json. A trainer nobody gave a plan (driven
without a controller, as in tests) plans for its own machine (`local_plan`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from loongsage.cluster.probe_all import probe_ray_cluster
from loongsage.cluster.topology import gather, probe_node
from loongsage.transfer.endpoints import engine_endpoints, source_name
from loongsage.transfer.plan_edits import without_relays
from loongsage.transfer.planner import plan_routes
from loongsage.transfer.push import LOOPBACK
from loongsage.transfer.relay import RelayActor
from loongsage.transfer.routes import Endpoint, Plan
from loongsage.transfer.topology_model import TopologyModel
from loongsage.transfer.transport_choice import weight_sync_transports

log = logging.getLogger(__name__)

PLAN_FILE = "transfer_plan.json"
RELAY_START_TIMEOUT_S = 120


class SourceSeat(NamedTuple):
    """Where a trainer rank that is a source runs."""

    host: str
    gpus: list[int]


class PlannedPushes(NamedTuple):
    plan: Plan
    relays: list  # the relay actors started for it (`stop_relays` at shutdown)


def plan_weight_routes(
    weight_sync: str,
    sources: dict[int, SourceSeat],
    engine_urls: list[str],
    engine_gpus: list[list[int]] | None,
    run_dir: Path,
) -> PlannedPushes:
    """`sources`: trainer rank -> seat of each rank that holds a full replica once a push has
    gathered the weights (`TrainGroup.weight_sources`)."""
    topology = probed_topology()
    senders = [
        Endpoint(source_name(rank), "source", seat.host, probed_gpus(topology, seat.host, seat.gpus))
        for rank, seat in sources.items()
    ]
    return plan_pushes(
        topology,
        senders,
        engine_urls,
        engine_gpus,
        weight_sync_transports(weight_sync),
        run_dir / PLAN_FILE,
        f"trainer.weight_sync={weight_sync}",
    )


def plan_pushes(
    topology: TopologyModel,
    senders: list[Endpoint],
    engine_urls: list[str],
    engine_gpus: list[list[int]] | None,
    transports: set[str] | None,
    plan_path: Path,
    what: str,
) -> PlannedPushes:
    """The route plan from `senders` to the engines at `engine_urls` (each on `engine_gpus[i]`),
    with its relays started; written to `plan_path` and logged under `what`."""
    engines = [replace(e, gpus=probed_gpus(topology, e.host, e.gpus)) for e in engine_endpoints(engine_urls, engine_gpus)]
    planned = _start_relays(plan_routes(topology, senders, engines, transports), topology)
    plan_path.write_text(json.dumps(planned.plan.to_dict(), indent=2) + "\n")
    log.info("%s:\n%s", what, planned.plan.render())
    return planned


def local_plan(engine_urls: list[str], weight_sync: str, source_host: str, source_ranks: Sequence[int] = (0,)) -> Plan:
    """The plan of a trainer nobody gave one: this machine's probe, the trainer ranks
    `source_ranks` (on this machine) the sources, no relays."""
    topology = TopologyModel(gather([probe_node(addresses=[source_host, *LOOPBACK])]))
    sources = [Endpoint(source_name(rank), "source", source_host) for rank in source_ranks]
    return without_relays(plan_routes(topology, sources, engine_endpoints(engine_urls), weight_sync_transports(weight_sync)))


def probed_topology() -> TopologyModel:
    """Every Ray node probed; engines serving on 127.0.0.1 are on this controller's node."""
    return _loopback_is_here(TopologyModel(probe_ray_cluster()).with_ray_nodes(ray.nodes()))


def _start_relays(plan: Plan, topology: TopologyModel) -> PlannedPushes:
    """One RelayActor per relay of the plan, on the Ray node of its host, serving on that node's
    address; the plan's relay endpoints get their URLs."""
    nodes = {topology.host(node["NodeManagerAddress"]): node for node in ray.nodes() if node.get("Alive")}
    actor = ray.remote(RelayActor)
    relays, endpoints = [], dict(plan.endpoints)
    for relay in plan.by_role("relay"):
        node = nodes[relay.host]
        forwards: dict[str, list[str]] = {}
        for route in plan.routes_from(relay.name):
            forwards.setdefault(route.transport, []).append(plan.endpoint(route.receiver).url)
        handle = actor.options(
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            # A GPU relay uses a device some engine holds (the one nearest its NIC): it asks Ray for
            # none, and sees them all by physical index.
            runtime_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}} if relay.gpus else None,
        ).remote(forwards, node["NodeManagerAddress"], relay.gpus[0] if relay.gpus else None)
        relays.append(handle)
        endpoints[relay.name] = replace(relay, url=ray.get(handle.start.remote(), timeout=RELAY_START_TIMEOUT_S))
    return PlannedPushes(Plan(endpoints, plan.routes, plan.notes), relays)


def stop_relays(relays: list) -> None:
    for relay in relays:
        ray.kill(relay)


def probed_gpus(topology: TopologyModel, host: str, gpus: Sequence[int]) -> tuple[int, ...]:
    """A seat's devices, where the probe of its host found GPUs. Where it found none (Slurm's fake
    GPUs in the CI's test cluster) the process there runs on the CPU: a CPU endpoint to the planner."""
    try:
        return tuple(gpus) if topology.node(host).gpus else ()
    except ValueError:  # an unknown host: the planner names it
        return tuple(gpus)


def _loopback_is_here(topology: TopologyModel) -> TopologyModel:
    """Engines of a one-machine run serve on 127.0.0.1: that is the node this controller runs on."""
    here = topology.host(ray.get_runtime_context().get_node_id())
    return replace(topology, aliases={**topology.aliases, **dict.fromkeys(LOOPBACK, here)})
