"""Weights between hosts: one tree per share, every NIC sending at most one stream.

The weights are split into S shares (S = the most relays a host has). A host with K relays
receives share s into relay s % K, over that relay's NIC, so each of its NICs takes in its part
of one copy. Hosts take turns at being inner nodes: host number i (in host order) is inner in
share i % S's tree, a leaf in the others. An inner host passes its share on over every one of its
NICs: the relay that got it hands it to its sibling relays through the host (cuda_ipc over
NVLink), and each sends it to one more host. So every NIC carries at most one stream out and
one copy of its shares in, and a share reaches H hosts in about log_K(H / S) + 2 hops instead
of H in a chain: with buckets pipelined through the tree, each hop costs one bucket's time.

The trees start at the sources' ports (their NICs, or their hosts' TCP ports): share s starts
from every port numbered s modulo S, so more source NICs mean more roots. Engines of a relay
host take each share from the relay on the host that holds it with the best link (their own
GPU's relay first). Direct engines (hosts without relays) take each share from a port the
trees left unused, else from the least-loaded holder of it.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection
from dataclasses import dataclass

from loongsage.transfer.routes import Endpoint, Route
from loongsage.transfer.topology_model import TopologyModel
from loongsage.transfer.transport_choice import TRANSPORTS, Option, best_option, options


@dataclass(frozen=True)
class _Port:
    """A sender that can pass a share on: `endpoint` holds it, or gets it first from `supplier`
    (another port on its host, itself perhaps fed by a port before it)."""

    endpoint: Endpoint
    supplier: _Port | None = None
    seed_of: str | None = None  # the source port it starts a tree from (reserved until used)


class ShareTrees:
    def __init__(self, topology: TopologyModel, allowed: Collection[str], sources: list[Endpoint]):
        self.topology, self.allowed, self.sources = topology, allowed, sources
        self.routes: list[Route] = []
        self.holds: dict[str, set[int] | None] = {s.name: None for s in sources}  # None: every share
        self.depth: Counter = Counter()  # (endpoint, share) -> hosts crossed from a source
        self.load: Counter = Counter()  # sending port -> streams it carries out
        self.reserved: Counter = Counter()  # source port -> tree starts not yet sent (so nothing else takes them)
        self.fan_load: Counter = Counter()  # relay -> copies it sends inside its host (NVLink / shm)
        self.relays_of: dict[str, list[Endpoint]] = {}  # host -> its relays
        self.streams: Counter = Counter()  # share streams between hosts, by who sends them

    def spread(self, relay_hosts: list[tuple[list[Endpoint], list[Endpoint]]], direct: list[Endpoint]) -> list[str]:
        """Add the routes; returns notes saying what was built."""
        if not relay_hosts and not direct:
            return []
        self.relays_of = {relays[0].host: relays for relays, _ in relay_hosts}
        first = relay_hosts[0][0][0] if relay_hosts else direct[0]
        ports = self._source_ports(first)
        shares = max((len(relays) for relays, _ in relay_hosts), default=0) or len(ports)
        queues = {s: deque(self._seeds(ports, s, shares)) for s in range(shares)}
        for share in range(shares):
            self._tree(share, shares, relay_hosts, queues[share])
        for relays, engines in relay_hosts:
            self._fan_out(relays, engines, shares)
        for engine in direct:
            for share in range(shares):
                self._feed(engine, share, shares, queues[share])
        return [self._note(shares, ports)]

    # ------------------------------------------------------------ trees

    def _source_ports(self, receiver: Endpoint) -> dict[str, list[Endpoint]]:
        """Sending port -> the sources behind it, for routes towards hosts like `receiver`'s."""
        ports: dict[str, list[Endpoint]] = {}
        for source in self.sources:
            option = self._best(source, receiver)
            if option is not None and source.host != receiver.host:
                ports.setdefault(self._port(source, option), []).append(source)
        return ports or {f"{self.sources[0].host}/tcp": [self.sources[0]]}

    def _seeds(self, ports: dict[str, list[Endpoint]], share: int, shares: int) -> list[_Port]:
        """The source ports that start share's tree: port q starts share q % S (port s % T when
        there are fewer ports than shares); the sources behind a port take turns."""
        keys = list(ports)
        numbers = range(share, len(keys), shares) if len(keys) >= shares else [share % len(keys)]
        seeds = [_Port(ports[keys[q]][share % len(ports[keys[q]])], seed_of=keys[q]) for q in numbers]
        self.reserved.update(seed.seed_of for seed in seeds)
        return seeds

    def _tree(self, share: int, shares: int, relay_hosts, queue: deque) -> None:
        count = len(relay_hosts)
        inner = [n for n in range(count) if n % shares == share]
        # Leaves in an order that starts at a different host for each share: with fewer hosts than
        # shares, the hosts that get a share first (and pass it on) take turns.
        leaves = [n for n in ((share + k) % count for k in range(count)) if n % shares != share]
        for n in inner + leaves:
            relays = relay_hosts[n][0]
            receiver = relays[share % len(relays)]
            self._feed(receiver, share, shares, queue)
            if n in inner:  # its relays pass the share on, the one holding it first
                queue.extend(_sibling_chain(receiver, relays))

    def _feed(self, receiver: Endpoint, share: int, shares: int, queue: deque) -> None:
        """One share into `receiver`: from the next usable port of the tree (breadth first, so the
        tree stays shallow), else the least-loaded holder. Ports are taken in tree order, not by
        link speed: in a cluster mixing RDMA and TCP hosts a TCP host may pass a share on over TCP."""
        while queue:
            port = queue.popleft()
            if port.seed_of:
                self.reserved[port.seed_of] -= 1
            if port.endpoint.host == receiver.host:
                continue
            option = self._best(port.endpoint, receiver)
            if option is not None and self._ready(port, share, shares):
                self._send(port.endpoint, receiver, option, share, shares)
                return
        self._send_from_least_loaded(receiver, share, shares)

    def _ready(self, port: _Port, share: int, shares: int) -> bool:
        """The port's endpoint holds the share, or gets it now from its supplier inside the host."""
        if self._holds(port.endpoint, share):
            return True
        if port.supplier is None or not self._ready(port.supplier, share, shares):
            return False
        supplier = port.supplier.endpoint
        option = self._best(supplier, port.endpoint)
        if option is None:
            return False
        self.routes.append(Route(supplier.name, port.endpoint.name, option.transport, option.link, share, shares))
        self.fan_load[supplier.name] += 1
        self._hold(port.endpoint, share, self.depth[(supplier.name, share)])
        return True

    def _send_from_least_loaded(self, receiver: Endpoint, share: int, shares: int) -> None:
        """When a tree has no port left: the least-loaded, then shallowest, port among the sources
        and every relay on a host that holds the share (a sibling of the holder gets it first)."""
        found = []
        for n, port in enumerate(self._ports_holding(share)):
            if port.endpoint.host != receiver.host and (option := self._best(port.endpoint, receiver)):
                key = self._port(port.endpoint, option)
                depth = self.depth[((port.supplier or port).endpoint.name, share)]
                rank = (-option.gbps, TRANSPORTS.index(option.transport), self.load[key] + self.reserved[key], depth, n)
                found.append((rank, port, option))
        for _, port, option in sorted(found, key=lambda item: item[0]):
            if self._ready(port, share, shares):
                self._send(port.endpoint, receiver, option, share, shares)
                return
        raise ValueError(self._unreachable(receiver))

    def _ports_holding(self, share: int) -> list[_Port]:
        ports = [_Port(source) for source in self.sources]
        for relays in self.relays_of.values():
            holder = next((r for r in relays if self._holds(r, share)), None)
            if holder is not None:
                ports += [_Port(r, None if self._holds(r, share) else _Port(holder)) for r in relays]
        return ports

    def _send(self, sender: Endpoint, receiver: Endpoint, option: Option, share: int, shares: int) -> None:
        self.routes.append(Route(sender.name, receiver.name, option.transport, option.link, share, shares))
        self.load[self._port(sender, option)] += 1
        self.streams["from the sources" if self.holds.get(sender.name, set()) is None else "passed on"] += 1
        if receiver.role == "relay":
            self._hold(receiver, share, self.depth[(sender.name, share)] + 1)

    def _hold(self, relay: Endpoint, share: int, depth: int) -> None:
        self.holds.setdefault(relay.name, set()).add(share)
        self.depth[(relay.name, share)] = depth

    def _holds(self, endpoint: Endpoint, share: int) -> bool:
        held = self.holds.get(endpoint.name, set())
        return held is None or share in held

    # ------------------------------------------------------------ inside a relay host

    def _fan_out(self, relays: list[Endpoint], engines: list[Endpoint], shares: int) -> None:
        # shares only one relay holds first: the choice for the others then avoids the relays
        # that will be busy anyway
        by_holders = sorted(range(shares), key=lambda share: sum(self._holds(r, share) for r in relays))
        for engine in engines:
            for share in by_holders:
                found = []
                for n, relay in enumerate(relays):
                    option = self._best(relay, engine) if self._holds(relay, share) else None
                    if option is not None:
                        rank = (-option.gbps, TRANSPORTS.index(option.transport), self.fan_load[relay.name], n)
                        found.append((rank, relay, option))
                _, relay, option = min(found, key=lambda item: item[0])
                self.routes.append(Route(relay.name, engine.name, option.transport, option.link, share, shares))
                # copies leaving the relay (its GPU's NVLink): one per engine GPU it is not on
                self.fan_load[relay.name] += len(set(engine.gpus) - set(relay.gpus)) if engine.gpus else 1

    # ------------------------------------------------------------ helpers

    def _best(self, sender: Endpoint, receiver: Endpoint) -> Option | None:
        return best_option(self.topology, sender, receiver, self.allowed)

    def _port(self, sender: Endpoint, option: Option) -> str:
        """The port a route between hosts leaves through: the sender's NIC, or its host's TCP port."""
        if option.link == "rdma":
            return f"{sender.host}/{self.topology.nic_of(sender.host, sender.gpus[0])}"
        return f"{sender.host}/tcp"

    def _unreachable(self, receiver: Endpoint) -> str:
        reach = {o.transport for s in self.sources for o in options(self.topology, s, receiver)}
        could = [t for t in TRANSPORTS if t in reach]
        where = f"{receiver.host}/" + (",".join(f"gpu{g}" for g in receiver.gpus) or "cpu")
        return (
            f"{receiver.role} {receiver.name} @ {where}: no allowed transport reaches it from any holder of the weights "
            f"(allowed: {', '.join(self.allowed)}; from the sources it could be reached over: {', '.join(could) or 'nothing'})"
        )

    def _note(self, shares: int, ports: dict[str, list[Endpoint]]) -> str:
        depth = max(self.depth.values(), default=0)
        busiest = max(self.load.values(), default=0)
        return (
            f"between hosts: {shares} share(s), one tree each; {self.streams['from the sources']} stream(s) from the "
            f"sources over {len(ports)} port(s), {self.streams['passed on']} passed on by relays; deepest relay "
            f"{depth} host hop(s) from a source; busiest port sends {busiest} stream(s)"
        )


def _sibling_chain(holder: Endpoint, relays: list[Endpoint]) -> list[_Port]:
    """The ports of an inner host: the relay holding the share, then its siblings, each getting the
    share from the one before it. A chain, not a star: each relay's GPU sends the share on once,
    so the relay that brought it in can still serve it to the host's engines (a tensor-parallel
    engine over all eight GPUs reads each share from one GPU seven times)."""
    ports = [_Port(holder)]
    for relay in relays:
        if relay is not holder:
            ports.append(_Port(relay, ports[-1]))
    return ports
