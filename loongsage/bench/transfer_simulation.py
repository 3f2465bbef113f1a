"""Event model of one weight update on a GPU cluster: how long it takes to deliver every bucket
to every engine GPU along a route plan, against a physical lower bound.

Pure: numpy only (no Ray, no torch in this module). `python -m loongsage.bench transfer
--simulate` drives it (loongsage/bench/transfer_simulate.py); the event model over flows is
`flow_events`; tests in tests/unit/bench/test_transfer_simulation.py. It reads the same topology model (`topology_model`) and
the same plans (`planner.plan_routes`, `routes.Plan`) the mesh executes.

Assumptions, with their sources
-------------------------------
- Links: `links.NOMINAL_LINKS` through `TopologyModel.resources`: NVLink4 450 GB/s each way per
  H100/H200 GPU, PCIe Gen5 x16 64 GB/s each way, InfiniBand NDR 400 Gb/s = 50 GB/s per NIC each
  way, one NIC per GPU (DGX/HGX H100 layout), H200 HBM 4.8 TB/s so a copy inside a GPU runs at
  2.4 TB/s (ANCHORS.md, "Links and measured update times"). Nominal rates: measured NDR
  throughput is ~5-10% lower, which scales every strategy and the bound alike.
- The network between hosts is non-blocking (a rail-optimised fat tree): only NICs contend.
- Every source (trainer rank) holds the whole model when the transfer starts: the trainer's
  export (Megatron-Bridge / FSDP gather of its shards into full tensors, written straight into
  flat buckets) comes first and is the same for every strategy, so it is not counted. In the
  colocated layout that export is the real cost of an update and this model says nothing
  about it; there, what the strategies differ in is which copies they make on and between GPUs.
- Every rank of an engine takes in the full tensors (routes.Endpoint; SGLang slices them per
  rank on arrival) and copies them into its parameters (one HBM copy of the model per GPU).
- Per-bucket software costs (an HTTP call per bucket, Python per tensor, kernel launches) are
  not modelled, for any strategy; nor is NVSwitch multicast (NVLS).

What is modelled
----------------
A transfer is a set of *flows*. A flow carries a stream of buckets, in order, over the
physical resources it occupies (a NIC's sending side, a GPU's NVLink ingress, a GPU's HBM...),
each with a bandwidth. `plan_flows` makes one flow per route of a plan, with the resources
`TopologyModel.resources(sender, receiver, link)` names: a route into an engine of several GPUs
lists each GPU's part (rdma into the first GPU, then NVLink from it to the others, as NCCL's
ring inside a host does; cuda_ipc from the sender's GPU to each rank), a resource listed n
times carrying the bytes n times. Then one *load* flow per engine that received into a buffer:
each GPU copies every bucket into its parameters. A same-device cuda_ipc route is that copy.

Contention: flows that share a resource split its bandwidth max-min fairly (progressive
filling; a flow also has its own cap when it has caught up with its upstream, see below).
Why max-min and not per-bucket serialisation on each resource: NICs, NVLink ports and copy
engines interleave concurrent transfers at packet/chunk granularity (hundreds of KB, far below
a bucket), so two streams on one NIC each get about half of it at the same time; serialising
whole buckets would let one stream finish a bucket first, which no transport does, and the
result would depend on the order in which the model lists the flows. Max-min is the standard
fluid model of flow-level networks (Bertsekas & Gallager, Data Networks, ch. 6.5; SimGrid's
network model): equal flows on one link get 1/n of it each.

Pipelining: store and forward at bucket granularity. A flow may send bucket k once its sender
holds bucket k: a flow whose sender is fed by upstream flows can at any time have sent at most
(progress of the slowest upstream - one bucket), as fractions of their bytes (buckets are
interleaved by index, routes.Route shares, so progress fractions compare; "one bucket" is the
coarser of the two flows' buckets). So a relay forwards bucket k while it receives k + 1, and an
engine loads k while k + 1 arrives. Buffering at relays is unlimited (a relay never stalls its
upstream). A chain of H equal hops takes M / bw + (H - 1) * (bucket / bw + latency) + latency.

Latency: each hop has its link class's latency (`links.NOMINAL_LINKS`). A flow starts one
latency after its upstream sent its first bucket and sends its last bucket one latency after
its upstream's last one landed; in between a transport keeps several messages in flight
(NCCL's chunk steps, RDMA work queues), so latency is paid once per hop on the critical path.

The model moves from event to event (a flow starts, finishes, catches up with its upstream, an
upstream's last bucket lands); between events every rate is constant; at each event the rates
are recomputed by max-min over the running flows, iterated with the upstream caps to a fixed point.

The strategies compared (`compare`)
-----------------------------------
(a) seed: the reference implementation's route (ANCHORS.md: same physical GPU -> CUDA IPC
    handle, otherwise NCCL broadcast from source rank 0; 1 GiB buckets). An engine GPU with a
    source on it takes a CUDA IPC handle (one HBM copy per bucket); every other engine GPU is a
    rank of one NCCL communicator rooted at rank 0. Per 1 GiB bucket, nothing overlapping: the
    broadcast, then the engines copy it into their parameters (update_weights_from_distributed
    returns after loading), then the next bucket. NCCL runs broadcast only with its ring
    algorithm (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel: for every collective but
    all-reduce only NCCL_ALGO_RING is costed): data pipelined in chunks around a ring of all
    ranks, so the bandwidth is the slowest hop's, and the time is NCCL's own cost model,
    baseLat + nRanks * hwLat + bytes / busBw, baseLat(Ring, Simple) = 8.4 us, hwLat(NET, Ring,
    Simple) = 9.6 us per step (3.4 us over NVLink on one host; same file). busBw is the
    narrowest node boundary of the ring: a host passes the ring through the NICs local to its
    GPUs in the communicator (one NIC per GPU on the GPU's PCIe switch; a GPU reaches the
    network through its own PCIe link, and borrowing a peer's NIC over NVLink, PXN, needs that
    peer in the communicator). Disaggregated, rank 0 is the only GPU of its host in the
    communicator, so every byte leaves through its one NIC: 50 GB/s. (Through its whole PCIe
    link instead, 64 GB/s, the seed would be 1.28x faster at most.)
(b) flat: no relays and no regard for hosts: each engine takes the model in 8 shares, each
    straight from a source, the sources taking turns (`flat_plan`), over the transport the
    planner's own rule picks for the pair; same event model.
(c) plan: `planner.plan_routes(topology, sources, engines)`; same event model.

Lower bound (`lower_bound`): plan-independent, physical (with the assumptions above), the
largest of, each bytes / bandwidth:
  gpu_ingress    an engine GPU with no source on it takes in the model M through its ingress
                 ports, NVLink in + PCIe in (it cannot receive faster whatever relays it);
  copy           every engine GPU copies M into its parameters at the HBM copy rate;
  node_ingress   a host with engine GPUs and no source takes in M through all its NICs together;
  source_egress  when some engine host has no source, M leaves the sources' hosts through all
                 their NICs together (at least one copy of each byte must leave them).
It leaves out latency and pipeline fill, so no plan reaches it exactly: a plan whose chains are
H hops deep pays about H buckets' time and H latencies on top.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from loongsage.bench.flow_events import Flow, FlowResult, run_flows
from loongsage.transfer.routes import Endpoint, Plan, Route

GB = 1e9
GiB = 2**30
MiB = 2**20


# ----------------------------------------------------------------------------------------------
# Plans as flows
# ----------------------------------------------------------------------------------------------

_COPY = "same_device"  # the link class of a copy inside one GPU's memory


class Fabric(Protocol):
    """What the simulator reads from a topology model (topology_model.TopologyModel)."""

    def resources(self, sender: Endpoint, receiver: Endpoint, link: str | None = None) -> list[tuple[str, float]]: ...

    def link_spec(self, cls: str) -> LinkLike: ...


class LinkLike(Protocol):
    gbps: float
    latency_s: float


def buckets_of(model_bytes: float, bucket_bytes: float) -> tuple[int, float]:
    """(number of buckets, GB per bucket): the model cut into equal buckets of at most `bucket_bytes`."""
    if model_bytes <= 0 or bucket_bytes <= 0:
        raise ValueError(f"model bytes ({model_bytes}) and bucket bytes ({bucket_bytes}) must be > 0")
    count = max(1, math.ceil(model_bytes / bucket_bytes))
    return count, model_bytes / count / GB


def _share_count(count: int, share: int, shares: int) -> int:
    return len(range(share, count, shares))


def _overlap(a: int, a_of: int, b: int, b_of: int) -> bool:
    """Do shares a of a_of and b of b_of (bucket index modulo) have a bucket in common?"""
    return (a - b) % math.gcd(a_of, b_of) == 0


def _route_order(plan: Plan) -> list[Route]:
    """Routes so that every route that brings a sender a bucket comes before the routes that pass
    that bucket on (Plan.check allows two hosts to feed each other different shares, so the order
    is per share, not per endpoint)."""
    into: dict[str, list[int]] = defaultdict(list)
    for i, route in enumerate(plan.routes):
        into[route.receiver].append(i)
    needs = [
        [j for j in into[r.sender] if _overlap(r.share, r.shares, plan.routes[j].share, plan.routes[j].shares)]
        for r in plan.routes
    ]
    order: list[int] = []
    state = [0] * len(plan.routes)  # 0 unseen, 1 on the stack, 2 placed
    for first in range(len(plan.routes)):
        stack = [(first, iter(needs[first]))]
        if state[first]:
            continue
        state[first] = 1
        while stack:
            i, pending = stack[-1]
            j = next(pending, None)
            if j is None:
                stack.pop()
                state[i] = 2
                order.append(i)
            elif state[j] == 1:
                r = plan.routes[j]
                raise ValueError(
                    f"routes pass a share around a cycle through {r.sender} -> {r.receiver} (share {r.share}/{r.shares})"
                )
            elif state[j] == 0:
                state[j] = 1
                stack.append((j, iter(needs[j])))
    return [plan.routes[i] for i in order]


def plan_flows(plan: Plan, fabric: Fabric, model_bytes: float, bucket_bytes: float) -> list[Flow]:
    """One flow per route (its resources from the topology model: a route into an engine of several
    GPUs lists each GPU's share of the path), then one *load* flow per engine that received into a
    buffer: each of its GPUs copies every bucket into the parameters (HBM, pipelined with the
    arrival of the next). A same-device cuda_ipc route is itself that copy, so it has no load.
    Sources hold every bucket at time 0 (module docstring)."""
    plan.check()
    count, bucket_gb = buckets_of(model_bytes, bucket_bytes)
    flows: list[Flow] = []
    into: dict[str, list[tuple[int, Route]]] = defaultdict(list)
    for route in _route_order(plan):
        buckets = _share_count(count, route.share, route.shares)
        if buckets == 0:
            continue
        sender, receiver = plan.endpoint(route.sender), plan.endpoint(route.receiver)
        upstream: tuple[int, ...] = ()
        if sender.role != "source":
            upstream = tuple(i for i, r in into[sender.name] if _overlap(route.share, route.shares, r.share, r.shares))
            if not upstream:
                raise ValueError(f"route {route.sender} -> {route.receiver}: the sender receives none of share {route.share}")
        resources = tuple(fabric.resources(sender, receiver, route.link))
        name = f"{route.sender}->{route.receiver}" + (f" {route.share}/{route.shares}" if route.shares > 1 else "")
        into[receiver.name].append((len(flows), route))
        flows.append(Flow(name, buckets * bucket_gb, buckets, resources, fabric.link_spec(route.link).latency_s, upstream))
    copy = fabric.link_spec(_COPY)
    for engine in plan.by_role("engine"):
        buffered = [i for i, r in into[engine.name] if r.link != _COPY]
        if not buffered or not engine.gpus:
            continue
        flows.append(
            Flow(
                f"load {engine.name}",
                sum(flows[i].gb for i in buffered),
                sum(flows[i].buckets for i in buffered),
                tuple((f"{engine.host}/gpu{g}:hbm", copy.gbps) for g in engine.gpus),
                copy.latency_s,
                tuple(buffered),
            )
        )
    return flows


def simulate_plan(plan: Plan, fabric: Fabric, model_bytes: float, bucket_bytes: float) -> FlowResult:
    """Seconds until every engine GPU holds every bucket of the model, along `plan`."""
    return run_flows(plan_flows(plan, fabric, model_bytes, bucket_bytes))


# ----------------------------------------------------------------------------------------------
# The seed's route: NCCL ring broadcast from rank 0, 1 GiB buckets one after another
# ----------------------------------------------------------------------------------------------

# NVIDIA/nccl src/graph/tuning.cc: baseLat[Ring][Simple] and hwLat[NET | NVLINK][Ring][Simple], in us.
NCCL_RING_BASE_LAT_S = 8.4e-6
NCCL_RING_STEP_LAT_S = {"net": 9.6e-6, "nvlink": 3.4e-6}
SEED_BUCKET_BYTES = GiB


@dataclass
class SeedEstimate:
    seconds: float
    buckets: int
    nccl_ranks: int
    ring_gbps: float
    per_bucket_s: float
    ipc_engine_gpus: int


def seed_nccl_seconds(topology, sources: list[Endpoint], engines: list[Endpoint], model_bytes: float) -> SeedEstimate:
    """The reference implementation's route (module docstring, strategy a): an engine GPU that has a
    sender (any source) on the same GPU takes a CUDA IPC handle (one HBM copy per bucket), every
    other engine GPU is a rank of one NCCL communicator rooted at source rank 0 (`sources[0]`).
    Per 1 GiB bucket, nothing overlapping: NCCL ring broadcast (NCCL's own cost model, see the
    constants), then the engines copy it into their parameters (update_weights_from_distributed
    returns after loading). Bucket k + 1 starts when bucket k is loaded everywhere."""
    rank0 = sources[0]
    if not rank0.gpus:
        raise ValueError(f"seed route: source rank 0 ({rank0.name}) has no GPU; NCCL needs one")
    source_gpus = {(s.host, g) for s in sources for g in s.gpus}
    engine_gpus = sorted({(e.host, g) for e in engines for g in e.gpus})
    ipc = [p for p in engine_gpus if p in source_gpus]
    ranks = [p for p in engine_gpus if p not in source_gpus]
    copy_gbps = topology.link_spec(_COPY).gbps
    count = max(1, math.ceil(model_bytes / SEED_BUCKET_BYTES))
    sizes_gb = [SEED_BUCKET_BYTES / GB] * (count - 1) + [(model_bytes - (count - 1) * SEED_BUCKET_BYTES) / GB]
    members: dict[str, set[int]] = defaultdict(set)
    members[rank0.host].add(rank0.gpus[0])
    for host, gpu in ranks:
        members[host].add(gpu)
    nodes = len(members)
    if nodes > 1:
        # every node boundary of the ring goes through the NICs local to the node's ranks
        ring = min(_local_nic_gbps(topology, h, gpus) for h, gpus in members.items())
        ring = min(ring, topology.link_spec("nvlink").gbps)  # each rank forwards every byte over NVLink
        step = NCCL_RING_STEP_LAT_S["net"]
    else:
        ring = topology.link_spec("nvlink").gbps
        step = NCCL_RING_STEP_LAT_S["nvlink"]
    nranks = 1 + len(ranks)
    total = 0.0
    per_bucket = 0.0
    for size in sizes_gb:
        bcast = (NCCL_RING_BASE_LAT_S + nranks * step + size / ring + size / copy_gbps) if ranks else 0.0
        t = max(bcast, size / copy_gbps if ipc else 0.0)
        per_bucket = max(per_bucket, t)
        total += t
    return SeedEstimate(total, count, nranks if ranks else 0, ring if ranks else 0.0, per_bucket, len(ipc))


def _local_nic_gbps(topology, host: str, gpus: set[int]) -> float:
    nics = {topology.nic_of(host, g) for g in gpus} - {None}
    return sum(topology.nic_gbps(host, n) for n in nics) if nics else topology.tcp_gbps(host)


# ----------------------------------------------------------------------------------------------
# The flat broadcast: every engine straight from the sources, no relays
# ----------------------------------------------------------------------------------------------


def flat_plan(topology, sources: list[Endpoint], engines: list[Endpoint], shares: int = 8) -> Plan:
    """Strategy b: each engine takes the model in `shares` shares (at most one per source), share k
    of engine e from source (e * shares + k) mod len(sources): the sources take turns, each
    sending its shares straight to the engines, over the best transport between the two
    (transport_choice.best_option, the planner's own rule), with no relay and no regard for hosts."""
    from loongsage.transfer.transport_choice import best_option

    shares = max(1, min(shares, len(sources)))
    routes = []
    for e, engine in enumerate(engines):
        for k in range(shares):
            source = sources[(e * shares + k) % len(sources)]
            option = best_option(topology, source, engine)
            if option is None:
                raise ValueError(f"flat broadcast: no transport from {source.name} to {engine.name}")
            routes.append(Route(source.name, engine.name, option.transport, option.link, k, shares))
    plan = Plan({e.name: e for e in (*sources, *engines)}, routes, [f"flat: {shares} share(s) per engine from the sources"])
    plan.check()
    return plan


# ----------------------------------------------------------------------------------------------
# The lower bound
# ----------------------------------------------------------------------------------------------


@dataclass
class Bound:
    seconds: float
    term: str  # which constraint binds
    terms: dict[str, float] = field(default_factory=dict)


def lower_bound(topology, sources: list[Endpoint], engines: list[Endpoint], model_bytes: float) -> Bound:
    """Plan-independent physical bound (module docstring), with every source holding the whole model:
      gpu_ingress   an engine GPU with no source on it takes in M through NVLink in + PCIe in;
      copy          every engine GPU writes M into its parameters, one HBM copy (read + write);
      node_ingress  a host with engine GPUs and no source takes in M through all its NICs;
      source_egress when some engine host has no source, M leaves the sources' hosts through all their NICs.
    Each term is bytes / bandwidth; the bound is the largest."""
    m = model_bytes / GB
    source_gpus = {(s.host, g) for s in sources for g in s.gpus}
    source_hosts = {s.host for s in sources}
    terms: dict[str, float] = {}
    copy = topology.link_spec(_COPY).gbps
    pcie = topology.link_spec("pcie").gbps

    def put(key: str, seconds: float) -> None:
        terms[key] = max(terms.get(key, 0.0), seconds)

    def nic_total(host: str) -> float:
        nics = topology.rdma_nics(host)
        return sum(topology.nic_gbps(host, n) for n in nics) if nics else topology.tcp_gbps(host)

    engine_hosts = set()
    for engine in engines:
        engine_hosts.add(engine.host)
        for g in engine.gpus:
            put("copy", m / copy)
            if (engine.host, g) not in source_gpus:
                put("gpu_ingress", m / (_nvlink_in_gbps(topology, engine.host, g) + pcie))
    bare = [h for h in engine_hosts if h not in source_hosts]
    for host in bare:
        put("node_ingress", m / nic_total(host))
    if bare:
        put("source_egress", m / sum(nic_total(h) for h in source_hosts))
    term = max(terms, key=terms.get) if terms else "none"
    return Bound(terms.get(term, 0.0), term, terms)


def _nvlink_in_gbps(topology, host: str, gpu: int) -> float:
    """The GPU's NVLink ingress as the topology model states it (0 with no NVLink peer)."""
    peers = [g for g in range(len(topology.node(host).gpus)) if g != gpu]
    for peer in peers:
        if topology.node(host).link(peer, gpu).startswith("NV"):
            a = Endpoint("bound/a", "relay", host, (peer,))
            b = Endpoint("bound/b", "relay", host, (gpu,))
            for name, gbps in topology.resources(a, b, "nvlink"):
                if name.endswith(f"gpu{gpu}:nvlink_in"):
                    return gbps
    return 0.0


# ----------------------------------------------------------------------------------------------
# Configurations: models, layouts, the three strategies side by side
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """`engine_gpus`: GPUs of one engine on one host (routes.Endpoint lives on one host; an engine
    spanning hosts is one endpoint per host, each of its ranks still taking the full tensors)."""

    name: str
    params: float
    bytes_per_param: float
    engine_gpus: int
    note: str

    @property
    def bytes(self) -> float:
        return self.params * self.bytes_per_param


MODELS = {
    "7B": ModelSpec("7B", 7e9, 2, 1, "bf16 14 GB; engines tp1 (one per GPU)"),
    "70B": ModelSpec("70B", 70e9, 2, 8, "bf16 140 GB; engines tp8 (one per host, 17.5 GB of weights per GPU)"),
    "1T": ModelSpec(
        "1T",
        1e12,
        2,
        8,
        "bf16 2 TB; engines tp32 over 4 hosts (62.5 GB of weights per 141-GB H200), one endpoint per host",
    ),
}
LAYOUTS = ("disaggregated", "colocated")
TRAINER_FRACTION = 0.25  # disaggregated: the first quarter of the hosts train


def default_bucket_bytes(model_bytes: float) -> float:
    """Our bucket size: about 1/1024 of the model, a power of two between 16 MiB and 256 MiB.
    A pipeline of H hops pays about H buckets' time on top of M / bandwidth, so buckets must be
    small next to the model; below ~16 MiB per-bucket costs the model leaves out would grow."""
    target = model_bytes / 1024
    size = 16 * MiB
    while size * 2 <= min(target, 256 * MiB):
        size *= 2
    return float(size)


def layout_endpoints(
    topology, layout: str, model: ModelSpec, trainer_hosts: int | None = None
) -> tuple[list[Endpoint], list[Endpoint]]:
    """(sources, engines) on the topology's hosts. disaggregated: the first `trainer_hosts` hosts
    (default a quarter, at least one) hold one source per GPU, the others one engine per
    `model.engine_gpus` GPUs; colocated: every GPU holds a source and belongs to an engine."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    hosts = topology.hosts()
    if layout == "disaggregated":
        n_train = trainer_hosts if trainer_hosts is not None else max(1, round(len(hosts) * TRAINER_FRACTION))
        if not 0 < n_train < len(hosts):
            raise ValueError(f"disaggregated layout: {n_train} trainer host(s) of {len(hosts)} leaves no engine host")
        train, serve = hosts[:n_train], hosts[n_train:]
    else:
        train, serve = hosts, hosts
    sources = [Endpoint(f"trainer/{h}/{g}", "source", h, (g,)) for h in train for g in range(len(topology.node(h).gpus))]
    engines = []
    for h in serve:
        gpus = len(topology.node(h).gpus)
        for first in range(0, gpus - model.engine_gpus + 1, model.engine_gpus):
            engines.append(Endpoint(f"engine/{h}/{first}", "engine", h, tuple(range(first, first + model.engine_gpus))))
    return sources, engines


@dataclass
class Comparison:
    seed_s: float
    flat_s: float
    plan_s: float
    bound: Bound
    bucket_bytes: float
    seed: SeedEstimate
    plan: Plan
    plan_events: int

    def ratios(self) -> dict[str, float]:
        b = self.bound.seconds
        return {"seed": self.seed_s / b, "flat": self.flat_s / b, "plan": self.plan_s / b}


def compare(
    topology,
    sources: list[Endpoint],
    engines: list[Endpoint],
    model_bytes: float,
    bucket_bytes: float | None = None,
    plan: Plan | None = None,
    flat: bool = True,
) -> Comparison:
    """The three strategies and the bound for one configuration. `plan`: default
    planner.plan_routes(topology, sources, engines); `flat=False` skips strategy b (NaN)."""
    bucket = bucket_bytes or default_bucket_bytes(model_bytes)
    if plan is None:
        from loongsage.transfer.planner import plan_routes

        plan = plan_routes(topology, sources, engines)
    ours = simulate_plan(plan, topology, model_bytes, bucket)
    flat_s = simulate_plan(flat_plan(topology, sources, engines), topology, model_bytes, bucket).seconds if flat else math.nan
    seed = seed_nccl_seconds(topology, sources, engines, model_bytes)
    bound = lower_bound(topology, sources, engines, model_bytes)
    return Comparison(seed.seconds, flat_s, ours.seconds, bound, bucket, seed, plan, ours.events)


def busiest_resources(flows: Sequence[Flow], top: int = 3) -> list[tuple[str, float]]:
    """(resource, seconds) for the resources a set of flows loads most: bytes put on it (each use
    counted) / its bandwidth. The largest is what the plan cannot beat however well it pipelines."""
    load: dict[str, float] = defaultdict(float)
    cap: dict[str, float] = {}
    for f in flows:
        for name, gbps in f.resources:
            load[name] += f.gb
            cap[name] = gbps
    ranked = sorted(((name, load[name] / cap[name]) for name in load), key=lambda item: -item[1])
    return ranked[:top]
