"""The route planner: from the topology model, the holders of the weights (sources: trainer ranks,
each holding a full replica) and the engines, a Plan of who sends which share to whom.

Per host of engines:
  - the host holds a source: each engine takes a full copy from its best local source
    (cuda_ipc on the same GPU or over NVLink / PCIe P2P, nccl inside the host when IPC is not
    allowed, shm for CPU processes), the sources taking turns so none serves more than its share;
  - no source: the weights cross to it once, through relays (one per NIC on GPU hosts, see
    `relays`), and every relay fans its shares out to every engine of the host; a host where a
    relay brings nothing (one engine, one NIC) gets direct routes instead.
Between hosts the weights are split into shares and spread by one tree per share (see
`share_trees`): the sources' NICs start the trees, every NIC sends at most one stream, and a
share reaches H hosts in a number of hops that grows with log(H), not H.

`transports` restricts what routes may use; an engine nothing allowed reaches is a ValueError
that names it. Every plan returned has passed `Plan.check()`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from loongsage.transfer.relays import host_relays
from loongsage.transfer.routes import Endpoint, Plan, Route
from loongsage.transfer.share_trees import ShareTrees
from loongsage.transfer.topology_model import TopologyModel
from loongsage.transfer.transport_choice import TRANSPORTS, Option, allowed_transports, best_option


def plan_routes(
    topology: TopologyModel,
    sources: list[Endpoint],
    engines: list[Endpoint],
    transports: Collection[str] | None = None,
) -> Plan:
    allowed = allowed_transports(transports)
    sources = [topology.endpoint(s) for s in sources]
    engines = [topology.endpoint(e) for e in engines]
    _check_inputs(sources, engines)
    builder = _LocalRoutes(topology, allowed, sources)
    source_hosts = {s.host for s in sources}
    relay_hosts: list[tuple[list[Endpoint], list[Endpoint]]] = []
    direct: list[Endpoint] = []
    grouped = _by_host(engines, topology.hosts())
    crowded = len([h for h in grouped if h not in source_hosts]) > len(_source_ports(topology, sources))
    for host, group in grouped.items():
        if host in source_hosts:
            direct += builder.feed_locally(host, group)
            continue
        relays, note = host_relays(topology, host, group, sources, allowed, crowded)
        builder.notes.append(note)
        if relays:
            relay_hosts.append((relays, group))
        else:
            direct += group
    trees = ShareTrees(topology, allowed, sources)
    builder.notes += trees.spread(relay_hosts, direct)
    builder.routes += trees.routes
    relays = [relay for group, _ in relay_hosts for relay in group]
    plan = builder.plan(relays, engines)
    plan.check()
    return plan


def _check_inputs(sources: list[Endpoint], engines: list[Endpoint]) -> None:
    if not sources:
        raise ValueError("a route plan needs at least one source (a trainer rank holding the weights)")
    for endpoints, role in ((sources, "source"), (engines, "engine")):
        wrong = [e.name for e in endpoints if e.role != role]
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: passed as {role}s but their role is not {role!r}")
    names = Counter(e.name for e in (*sources, *engines))
    twice = sorted(n for n, count in names.items() if count > 1)
    if twice:
        raise ValueError(f"endpoint names used twice: {', '.join(twice)}")


def _source_ports(topology: TopologyModel, sources: list[Endpoint]) -> set[str]:
    """The ports the sources reach other hosts through: each GPU's RDMA NIC, else its host's TCP port."""
    ports = set()
    for source in sources:
        nic = topology.nic_of(source.host, source.gpus[0]) if source.gpus else None
        ports.add(f"{source.host}/{nic or 'tcp'}")
    return ports


def _by_host(engines: list[Endpoint], hosts: list[str]) -> dict[str, list[Endpoint]]:
    grouped: dict[str, list[Endpoint]] = {host: [] for host in hosts}
    for engine in engines:
        grouped[engine.host].append(engine)
    return {host: group for host, group in grouped.items() if group}


class _LocalRoutes:
    """Routes inside the hosts that hold sources; collects the plan's routes and notes."""

    def __init__(self, topology: TopologyModel, allowed: tuple[str, ...], sources: list[Endpoint]):
        self.topology, self.allowed, self.sources = topology, allowed, sources
        self.routes: list[Route] = []
        self.notes: list[str] = []
        self.local_load: Counter = Counter()  # copies each source serves inside its host

    def best(self, sender: Endpoint, receiver: Endpoint) -> Option | None:
        return best_option(self.topology, sender, receiver, self.allowed)

    def route(self, sender: Endpoint, receiver: Endpoint, option: Option, share: int = 0, shares: int = 1) -> None:
        self.routes.append(Route(sender.name, receiver.name, option.transport, option.link, share, shares))

    # ------------------------------------------------------------ inside a source's host

    def feed_locally(self, host: str, engines: list[Endpoint]) -> list[Endpoint]:
        """Routes from the host's sources; returns the engines none of them reaches."""
        local = [s for s in self.sources if s.host == host]
        unreached, used = [], Counter()
        for engine in engines:
            if self._reads_own_replicas(engine, local):
                continue
            found = [(o, n, s) for n, s in enumerate(local) if (o := self.best(s, engine))]
            if not found:
                unreached.append(engine)
                continue

            def rank(item, engine=engine):
                option, n, source = item
                shares_gpu = bool(set(source.gpus) & set(engine.gpus))  # a colocated engine reads its own GPU
                return (-option.gbps, TRANSPORTS.index(option.transport), not shares_gpu, self.local_load[source.name], n)

            option, _, source = min(found, key=rank)
            self.route(source, engine, option)
            self.local_load[source.name] += 1
            used[f"{option.transport}[{option.link}]"] += 1
        if used:
            kinds = ", ".join(f"{n} {kind}" for kind, n in used.items())
            self.notes.append(f"{host}: {sum(used.values())} engine(s) fed from {len(local)} local source(s): {kinds}")
        if unreached:
            names = ", ".join(e.name for e in unreached)
            self.notes.append(f"{host}: no allowed transport from a local source reaches {names}: fed from other hosts")
        return unreached

    def _reads_own_replicas(self, engine: Endpoint, local: list[Endpoint]) -> bool:
        """A tensor-parallel engine with a source on every one of its GPUs (colocated): one
        cuda_ipc[same_device] route, each of its ranks reads the replica on its own GPU (as SGLang's
        colocated update gathers every rank's handle), instead of seven ranks reading one GPU."""
        on_gpu = {g: s for s in reversed(local) for g in s.gpus}
        if len(engine.gpus) < 2 or "cuda_ipc" not in self.allowed or not set(engine.gpus) <= set(on_gpu):
            return False
        spec = self.topology.link_spec("same_device")
        self.route(on_gpu[engine.gpus[0]], engine, Option("cuda_ipc", "same_device", spec.gbps))
        for gpu in engine.gpus:
            self.local_load[on_gpu[gpu].name] += 1
        self.notes.append(f"{engine.host}: {engine.name} reads the replica on each of its {len(engine.gpus)} GPUs")
        return True

    # ------------------------------------------------------------ the plan

    def plan(self, relays: list[Endpoint], engines: list[Endpoint]) -> Plan:
        """Endpoints in reading order: sources, then per host its relays and its engines."""
        order = {host: n for n, host in enumerate(self.topology.hosts())}
        rest = sorted([*relays, *engines], key=lambda e: (order[e.host], e.role != "relay"))
        endpoints = {e.name: e for e in (*self.sources, *rest)}
        return Plan(endpoints, self.routes, self.notes)
