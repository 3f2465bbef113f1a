"""A route plan as data: who sends which share of the weights to whom, over which transport.

The planner (`planner.plan_routes`) writes a Plan from the topology model; the mesh executes
it on real transports and the bench's simulator (`bench.transfer_simulation`) replays it over modelled links; the run
dir keeps it as JSON and the start of a run prints it. Nothing here knows how bytes move.

Shares: every sender buckets the same named tensors in the same order with the same bucket
size, so bucket k is the same set of tensors everywhere. A route with `shares=S, share=s`
carries the buckets whose index is s modulo S. A receiver is covered when, for some S, every
share 0..S-1 reaches it exactly once; this lets several sources each send a share (no single
NIC carries everything) and several relays on a node each take a share over their own NIC.
An engine must be covered. A relay only needs the shares it passes on: each share reaches it at
most once, and it sends only shares it holds (a relay that is covered may send any share).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

ROLES = ("source", "relay", "engine")


@dataclass(frozen=True)
class Endpoint:
    """A holder or a receiver of the weights. `host`: the node as the topology model names it;
    `url`: an engine's HTTP base URL (None for sources and relays, which the mesh reaches through Ray).
    `gpus`: the physical GPU indices on that host it holds the weights on; empty on a CPU-only
    process. An engine with tensor parallelism holds every one of its ranks' GPUs, and each of
    them takes in the full tensors (SGLang slices them per rank on arrival)."""

    name: str
    role: str
    host: str
    gpus: tuple[int, ...] = ()
    url: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"endpoint {self.name!r}: role {self.role!r} is not one of {ROLES}")


@dataclass(frozen=True)
class Route:
    """One hop: `receiver` gets the buckets with index % shares == share from `sender` over
    `transport` (a registry name: cuda_ipc | nccl | shm | gloo | inline), crossing a link of
    class `link` (a topology-model link class: same_device | nvlink | pcie | host_shm | rdma | tcp).
    A same_device route into an engine of several GPUs means each of its GPUs reads the replica a
    source holds on that same GPU (the sources there hand over their IPC handles together, as
    SGLang's colocated update gathers every rank's handle); `sender` names the one on its first GPU."""

    sender: str
    receiver: str
    transport: str
    link: str
    share: int = 0
    shares: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.share < self.shares:
            raise ValueError(f"route {self.sender} -> {self.receiver}: shard {self.share} is not in 0..{self.shares - 1}")

    def carries(self, bucket_index: int) -> bool:
        return bucket_index % self.shares == self.share


@dataclass
class Plan:
    endpoints: dict[str, Endpoint]
    routes: list[Route]
    notes: list[str] = field(default_factory=list)  # why the planner chose what it chose

    def endpoint(self, name: str) -> Endpoint:
        if name not in self.endpoints:
            raise KeyError(f"the plan has no endpoint {name!r}")
        return self.endpoints[name]

    def by_role(self, role: str) -> list[Endpoint]:
        return [e for e in self.endpoints.values() if e.role == role]

    def routes_into(self, receiver: str) -> list[Route]:
        return [r for r in self.routes if r.receiver == receiver]

    def routes_from(self, sender: str) -> list[Route]:
        return [r for r in self.routes if r.sender == sender]

    def origin(self, route: Route) -> Route:
        """The route that brings `route`'s share from a source into its sender, followed back
        through any relays (a relay may get a share from a relay on another host, or from a
        sibling relay on its own). For a route out of a source, the route itself. Flattening a
        plan without running relays: `replace(plan.origin(r), receiver=r.receiver, share=r.share,
        shares=r.shares)` for each route out of a relay into an engine."""
        while self.endpoint(route.sender).role == "relay":
            # bucket number `share` lies in this route's share; whichever route into the relay
            # carries that bucket carries the share (its split divides this one, see check()).
            feeding = [r for r in self.routes_into(route.sender) if r.carries(route.share)]
            if len(feeding) != 1:
                raise ValueError(f"{route.sender}: {len(feeding)} routes bring it share {route.share}/{route.shares}")
            route = feeding[0]
        return route

    def transports(self) -> Counter:
        """Routes per transport, into engines and relays alike."""
        return Counter(r.transport for r in self.routes)

    def check(self) -> None:
        """Every engine is covered exactly once, every relay receives each share it forwards exactly
        once; only sources and relays send; nothing waits on itself. Raises ValueError naming the
        first endpoint that breaks a rule."""
        for route in self.routes:
            for name in (route.sender, route.receiver):
                self.endpoint(name)
            if self.endpoints[route.sender].role == "engine":
                raise ValueError(f"route {route.sender} -> {route.receiver}: an engine cannot send")
            if self.endpoints[route.receiver].role == "source":
                raise ValueError(f"route {route.sender} -> {route.receiver}: a source does not receive")
        for endpoint in self.endpoints.values():
            if endpoint.role == "engine":
                _check_covered(endpoint.name, self.routes_into(endpoint.name))
            elif endpoint.role == "relay":
                _check_relay(endpoint.name, self.routes_into(endpoint.name), self.routes_from(endpoint.name))
        self._check_acyclic()

    def _check_acyclic(self) -> None:
        """No bucket comes back to where it has been. Checked per bucket (the routes that carry
        bucket b, for b over one period of every split): relays forward bucket by bucket, so a
        relay may send one share to an endpoint that sends it another (two hosts each inner in
        the other's share tree) without anything waiting on itself."""
        period = math.lcm(*(r.shares for r in self.routes)) if self.routes else 1
        for bucket in range(period):
            feeds = defaultdict(set)
            for route in self.routes:
                if route.carries(bucket):
                    feeds[route.receiver].add(route.sender)
            done: set[str] = set()

            def visit(name: str, path: tuple[str, ...], feeds=feeds, done=done, bucket=bucket) -> None:
                if name in path:
                    where = f" (bucket {bucket} of every {period})" if period > 1 else ""
                    raise ValueError(f"routes form a cycle{where}: {' -> '.join((*path, name))}")
                if name in done:
                    return
                for sender in feeds[name]:
                    visit(sender, (*path, name))
                done.add(name)

            for name in self.endpoints:
                visit(name, ())

    def to_dict(self) -> dict:
        return {
            "endpoints": [asdict(e) for e in self.endpoints.values()],
            "routes": [asdict(r) for r in self.routes],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Plan:
        endpoints = [Endpoint(**{**e, "gpus": tuple(e.get("gpus", ()))}) for e in data["endpoints"]]
        return cls({e.name: e for e in endpoints}, [Route(**r) for r in data["routes"]], list(data.get("notes", [])))

    def render(self) -> str:
        """One line per receiver, engines grouped under the relay that feeds them."""
        lines = []
        counts = ", ".join(f"{n} {t}" for t, n in sorted(self.transports().items()))
        lines.append(
            f"route plan: {len(self.by_role('source'))} source(s), {len(self.by_role('relay'))} relay(s), "
            f"{len(self.by_role('engine'))} engine(s); routes: {counts or 'none'}"
        )
        for endpoint in self.endpoints.values():
            if endpoint.role == "source":
                continue
            where = f"{endpoint.host}/" + (",".join(f"gpu{g}" for g in endpoint.gpus) or "cpu")
            lines.append(f"  {endpoint.role} {endpoint.name} @ {where}: {_hops(self.routes_into(endpoint.name))}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


def _hops(routes: list[Route]) -> str:
    """Each route into a receiver; beyond three, a count per transport and link (a host's relays
    each feed every engine of it one share)."""
    if len(routes) <= 3:
        return "; ".join(
            f"{r.sender} --{r.transport}[{r.link}]-->" + (f" share {r.share}/{r.shares}" if r.shares > 1 else "") for r in routes
        )
    kinds = Counter(f"{r.transport}[{r.link}]" for r in routes)
    senders = list(dict.fromkeys(r.sender for r in routes))
    return (
        f"{len(routes)} shares of {routes[0].shares} from {len(senders)} sender(s) ({senders[0]} .. {senders[-1]}): "
        + ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    )


def _one_split(receiver: str, routes: list[Route]) -> int:
    """The number of shares the routes into `receiver` split the weights into (one for all)."""
    if not routes:
        raise ValueError(f"{receiver} receives nothing: no route reaches it")
    splits = {r.shares for r in routes}
    if len(splits) != 1:
        raise ValueError(f"{receiver} is reached by routes split {sorted(splits)} ways; one split per receiver")
    return splits.pop()


def _check_covered(receiver: str, routes: list[Route]) -> None:
    count = _one_split(receiver, routes)
    seen = Counter(r.share for r in routes)
    missing = [s for s in range(count) if s not in seen]
    twice = [s for s, n in seen.items() if n > 1]
    if missing or twice:
        raise ValueError(f"{receiver}: shares {missing} of {count} reach it never, shares {twice} more than once")


def _check_relay(relay: str, into: list[Route], out: list[Route]) -> None:
    """A relay holding shares H of an S-way split can send share s of an S'-way split when S
    divides S' and s % S is in H: exactly the buckets it holds (bucket b is in share b % S)."""
    count = _one_split(relay, into)
    seen = Counter(r.share for r in into)
    twice = sorted(s for s, n in seen.items() if n > 1)
    if twice:
        raise ValueError(f"{relay}: shares {twice} of {count} reach it more than once")
    if len(seen) == count:
        return
    for route in out:
        if route.shares % count or route.share % count not in seen:
            raise ValueError(
                f"route {relay} -> {route.receiver} forwards share {route.share}/{route.shares}, "
                f"but {relay} only receives shares {sorted(seen)} of {count}"
            )
