"""TransferMesh's push: one update round (`run_update_round`, around `update_round`) in which
every source of the plan runs its routes (`send_routes`), each group of routes (one transport,
one share) on a thread of its own (a push to the engines on this machine over shm goes at the
same time as the broadcast to other machines); it reports what each route moved and which
engines hold the new version. The sources are trainer ranks, each in its own process (TrainGroup
coordinates the round), or this process alone (`execute_plan`, `push_weights`).

Engines are named by URL in the plan; a push to some of them (a resync of engines that came
back) runs only their routes, straight from the source (`without_relays`), since a relay
forwards to everything it feeds. Relays (`relay.py`) take their routes from the source as an
engine would, and say which receivers they could not reach when the round closes them.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from urllib.parse import urlparse

import torch

from loongsage.inference.weight_wire.layout import NamedTensors
from loongsage.transfer.buckets import share_buckets
from loongsage.transfer.channel import get_transport
from loongsage.transfer.push import LOOPBACK, PushFailed, check_device, check_reach, push_with_retry, why
from loongsage.transfer.routes import Endpoint, Plan, Route
from loongsage.transfer.update_round import UpdateRound


@dataclass
class RouteReport:
    """What one group of a source's routes (one transport, one share) did; plain data, so a
    trainer rank can hand it to the round's coordinator through Ray."""

    transport: str
    receivers: list[str]
    num_bytes: int  # to each receiver
    retried: int
    failed: dict[str, str]  # receiver URL -> why, after its retry


@dataclass
class SourceReport:
    buckets: int  # in the whole push: every source buckets the weights the same way
    routes: list[RouteReport]


def execute_plan(
    plan: Plan,
    source: str,
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    engine_urls: list[str],
    version: int | str,
    sender_host: str,
    bucket_mb: float | None = None,
    pipelined: bool = True,
) -> dict:
    """One update round whose one source is this process (see `run_update_round`)."""
    return run_update_round(
        plan,
        engine_urls,
        version,
        lambda skip: [send_routes(plan, source, named_tensors, engine_urls, sender_host, bucket_mb, pipelined, skip)],
    )


def run_update_round(
    plan: Plan, engine_urls: list[str], version: int | str, send: Callable[[list[str]], list[SourceReport]]
) -> dict:
    """One update round (`update_round`): the sessions open, `send(skip)` runs every source's
    routes (`send_routes`; receivers in `skip` could not open theirs), then the relays close,
    every engine that got all its routes is committed to `version`, and the sessions close.
    Returns {"metrics": {...}, "updated": [engines holding `version`], "failed": {engine URL: why}}.
    A push to some of the engines (a resync) goes straight to them: a relay forwards to everything it feeds."""
    plan = _plan_for(plan, engine_urls)
    started = time.perf_counter()
    update = UpdateRound(engine_urls, [e.url for e in _relays_upstream_first(plan)])
    try:
        update.open()
        reports = send(sorted(update.failed))
        routes = [route for report in reports for route in report.routes]
        unreached = update.close_relays()
        failed_receivers = {url: why for route in routes for url, why in route.failed.items()}
        failed = _failed_engines(plan, engine_urls, {**update.failed, **failed_receivers}, unreached)
        update.commit(version, [url for url in engine_urls if url not in failed])
    finally:
        update.close()
    failed.update({url: reason for url, reason in update.failed.items() if url in engine_urls and url not in failed})
    seconds = time.perf_counter() - started
    return {
        "metrics": _metrics(routes, max((r.buckets for r in reports), default=0), seconds, failed),
        "updated": [url for url in engine_urls if url not in failed],
        "failed": failed,
    }


def send_routes(
    plan: Plan,
    source: str,
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    engine_urls: list[str],
    sender_host: str,
    bucket_mb: float | None = None,
    pipelined: bool = True,
    skip: Sequence[str] = (),
) -> SourceReport:
    """A source's part of an update round: its routes to the wanted engines (and the relays),
    each group (one transport, one share) on a thread of its own. Every source of the round
    streams every tensor (for a trainer rank that is a collective gather), but keeps only the
    buckets of its own shares."""
    plan = _plan_for(plan, engine_urls)
    groups = {key: [url for url in urls if url not in skip] for key, urls in _route_groups(plan, source, engine_urls).items()}
    kept, buckets = share_buckets(named_tensors, plan_bucket_bytes(plan, bucket_mb), [key[1:] for key in groups])
    with ThreadPoolExecutor(max_workers=max(len(groups), 1), thread_name_prefix="mesh-route") as pool:
        pushes = {
            key: pool.submit(
                push_with_retry,
                _share_maker(kept, key[1], key[2]),
                urls,
                key[0],
                sender_host,
                pipelined,
            )
            for key, urls in groups.items()
        }
        results = {key: push.result() for key, push in pushes.items()}
    routes = [
        RouteReport(
            key[0], groups[key], result.tally.num_bytes, result.retried, {url: why(e) for url, e in result.failed.items()}
        )
        for key, result in results.items()
    ]
    return SourceReport(buckets, routes)


def plan_bucket_bytes(plan: Plan, bucket_mb: float | None) -> int:
    """The push's one bucketing, the same in every source (a share is a set of bucket indices):
    `bucket_mb`, else the smallest default of the transports the sources' routes use."""
    if bucket_mb is None:
        sources = {e.name for e in plan.by_role("source")}
        bucket_mb = min((get_transport(r.transport).bucket_mb for r in plan.routes if r.sender in sources), default=64)
    return int(bucket_mb * 1024 * 1024)


def _route_groups(plan: Plan, source: str, engine_urls: list[str]) -> dict[tuple[str, int, int], list[str]]:
    """(transport, share, shares) -> the receivers' URLs, for the routes out of `source` that lead
    to a wanted engine (relays always: they forward to engines that are all wanted)."""
    check_covered(plan, engine_urls)
    wanted = set(engine_urls)
    groups: dict[tuple[str, int, int], list[str]] = defaultdict(list)
    for route in plan.routes_from(source):
        receiver = plan.endpoint(route.receiver)
        if receiver.role == "engine" and receiver.url not in wanted:
            continue
        if receiver.url is None:
            raise ValueError(f"{receiver.role} {receiver.name} has no URL: relays must be started before a push")
        groups[(route.transport, route.shard, route.shards)].append(receiver.url)
    return dict(groups)


def _plan_for(plan: Plan, engine_urls: list[str]) -> Plan:
    """The plan a push to `engine_urls` follows: the whole plan, or for some of its engines (a
    resync) their routes straight from the sources, since a relay forwards to everything it feeds."""
    check_covered(plan, engine_urls)
    return plan if set(engine_urls) == {e.url for e in plan.by_role("engine")} else without_relays(plan)


def check_covered(plan: Plan, engine_urls: list[str]) -> None:
    known = {e.url for e in plan.by_role("engine")}
    unknown = sorted(set(engine_urls) - known)
    if unknown:
        raise ValueError(f"the route plan has no route to {', '.join(unknown)}; it covers {', '.join(sorted(known))}")


def _share_maker(kept: dict[int, NamedTensors], shard: int, shards: int):
    return lambda: (kept[index] for index in sorted(kept) if index % shards == shard)


def _failed_engines(
    plan: Plan, engine_urls: list[str], failed_receivers: dict[str, str], unreached: dict[str, str]
) -> dict[str, str]:
    """Engines that did not get all of their routes: failed themselves, behind a relay that failed,
    or not reached by a relay."""
    failed = {url: why for url, why in failed_receivers.items() if url in engine_urls}
    for relay in plan.by_role("relay"):
        if relay.url in failed_receivers:
            for url in engines_behind(plan, relay.name):
                failed.setdefault(url, f"through relay {relay.name}: {failed_receivers[relay.url]}")
    for url, reason in unreached.items():
        if url in engine_urls:
            failed.setdefault(url, reason)
        else:  # a relay that a relay could not reach: everything behind it
            for relay in plan.by_role("relay"):
                if relay.url == url:
                    for engine in engines_behind(plan, relay.name):
                        failed.setdefault(engine, reason)
    return failed


def _relays_upstream_first(plan: Plan) -> list[Endpoint]:
    """A relay comes after every relay that feeds it (Plan.check refuses cycles of a bucket; a
    relay pair passing each other different shares closes upstream-first by name)."""
    relays = {e.name: e for e in plan.by_role("relay")}
    feeders = {name: {r.sender for r in plan.routes_into(name) if r.sender in relays and r.sender != name} for name in relays}
    ordered: list[Endpoint] = []
    while feeders:
        ready = sorted(name for name, senders in feeders.items() if not senders - {e.name for e in ordered}) or [min(feeders)]
        for name in ready:
            ordered.append(relays[name])
            del feeders[name]
    return ordered


def _metrics(routes: list[RouteReport], buckets: int, seconds: float, failed: dict[str, str]) -> dict[str, float]:
    metrics = {
        "transfer/bytes": 0.0,
        "transfer/buckets": float(buckets),
        "transfer/retries": float(sum(route.retried for route in routes)),
        "transfer/failed_receivers": float(len(failed)),
        "transfer/seconds": seconds,
    }
    for route in routes:
        moved = float(route.num_bytes * len(route.receivers))
        key = f"transfer/bytes/{route.transport}"
        metrics[key] = metrics.get(key, 0.0) + moved
        metrics["transfer/bytes"] += moved
    metrics["transfer/gbps"] = metrics["transfer/bytes"] / seconds / 1e9 if seconds > 0 else 0.0
    return metrics


def push_weights(
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    engine_urls: list[str],
    version: int,
    bucket_bytes: int | None = None,
    transport: str = "shm",
    sender_host: str = "127.0.0.1",
    pipelined: bool = True,
) -> dict[str, float]:
    """Every engine gets the whole model straight from this process over one transport, in one
    update round; raises PushFailed naming each engine that did not get it (after its retry).
    `bucket_bytes` None: the transport's default. `sender_host`: this machine's address as
    engines on it are named (and, for gloo | nccl, reach it)."""
    check_reach(transport, engine_urls, sender_host)
    check_device(transport)
    bucket_mb = None if bucket_bytes is None else bucket_bytes / (1024 * 1024)  # plan_bucket_bytes takes it back whole
    report = execute_plan(
        direct_plan(engine_urls, transport, sender_host),
        SOURCE,
        named_tensors,
        engine_urls,
        version,
        sender_host,
        bucket_mb,
        pipelined,
    )
    if report["failed"]:
        raise PushFailed(report["failed"])
    return report["metrics"]


def direct_plan(engine_urls: list[str], transport_name: str, source_host: str) -> Plan:
    """Every engine straight from one source over `transport_name`."""
    source = Endpoint(SOURCE, "source", source_host)
    engines = [Endpoint(f"engine/{i}", "engine", urlparse(url).hostname or "", url=url) for i, url in enumerate(engine_urls)]
    link = "host_shm" if get_transport(transport_name).same_host_only else "tcp"
    routes = [Route(SOURCE, e.name, transport_name, link) for e in engines]
    return Plan({e.name: e for e in [source, *engines]}, routes, [f"every engine over {transport_name}"])


def local_plan(engine_urls: list[str], weight_sync: str, source_host: str, source_ranks: Sequence[int] = (0,)) -> Plan:
    """The plan of a trainer nobody gave one (driven without a controller, as in tests): this
    machine's probe, the trainer ranks `source_ranks` (on this machine) the sources, engines named
    by URL; `weight_sync` "mesh" or the one transport allowed."""
    from loongsage.cluster.topology import gather, probe_node
    from loongsage.transfer.planner import plan_routes
    from loongsage.transfer.topology_model import TopologyModel

    topology = TopologyModel(gather([probe_node(addresses=[source_host, *LOOPBACK])]))
    sources = [Endpoint(source_name(rank), "source", source_host) for rank in source_ranks]
    engines = [Endpoint(f"engine/{i}", "engine", urlparse(url).hostname or "", url=url) for i, url in enumerate(engine_urls)]
    transports = None if weight_sync == "mesh" else {weight_sync}
    return without_relays(plan_routes(topology, sources, engines, transports))


def source_name(rank: int) -> str:
    """A trainer rank as a source of the plan."""
    return f"trainer/{rank}"


SOURCE = source_name(0)  # the one source of a push from a single process


def without_relays(plan: Plan) -> Plan:
    """Each engine fed through relays gets the route that brings its share out of a source
    instead, straight from that source."""
    relays = {e.name for e in plan.by_role("relay")}
    if not relays:
        return plan
    routes = [r for r in plan.routes if r.receiver not in relays and r.sender not in relays]
    for route in plan.routes:
        if route.sender in relays and route.receiver not in relays:
            routes.append(replace(plan.origin(route), receiver=route.receiver, shard=route.shard, shards=route.shards))
    endpoints = {name: e for name, e in plan.endpoints.items() if name not in relays}
    notes = [*plan.notes, f"without its {len(relays)} relay(s): their engines receive straight from the source"]
    return Plan(endpoints, routes, notes)


def engines_behind(plan: Plan, relay: str) -> list[str]:
    """Every engine a relay feeds, itself or through the relays it feeds."""
    found, waiting, seen = [], [relay], {relay}
    while waiting:
        for route in plan.routes_from(waiting.pop()):
            receiver = plan.endpoint(route.receiver)
            if receiver.name in seen:
                continue
            seen.add(receiver.name)
            if receiver.role == "relay":
                waiting.append(receiver.name)
            else:
                found.append(receiver.url)
    return found
