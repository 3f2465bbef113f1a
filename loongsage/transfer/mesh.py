"""TransferMesh on a sender: run the routes a plan gives this source, each transport on a
thread of its own (a push to the engines on this machine over shm goes at the same time as the
broadcast to the engines on other machines), and report what each route moved.

Engines are named by URL in the plan; a push to some of them (a resync of engines that came
back) runs only their routes, straight from the source (`without_relays`), since a relay
forwards to all of its engines. Relays (`relay.py`) take their route from the source as an engine
would; their engines' outcome comes back in the relay's answer to the last bucket.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from urllib.parse import urlparse

import torch

from loongsage.transfer.buckets import NamedTensors, Tally, iter_buckets
from loongsage.transfer.channel import get_transport
from loongsage.transfer.push import LOOPBACK, PushResult, push_buckets, why
from loongsage.transfer.routes import Endpoint, Plan, Route


def execute_plan(
    plan: Plan,
    source: str,
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    engine_urls: list[str],
    version: int,
    sender_host: str,
    bucket_mb: int | None = None,
    pipelined: bool = True,
) -> dict:
    """{"metrics": {...}, "updated": [urls holding `version`], "failed": {url: why}}. A push to
    some of the engines (a resync) goes straight to them: a relay forwards to all of its own."""
    named = list(named_tensors)
    if set(engine_urls) != {e.url for e in plan.by_role("engine")}:
        plan = without_relays(plan)
    by_transport = _routes_by_transport(plan, source, engine_urls)
    tally = Tally()
    with ThreadPoolExecutor(max_workers=max(len(by_transport), 1), thread_name_prefix="mesh-route") as pool:
        pushes = {
            name: pool.submit(
                push_buckets,
                _bucket_maker(named, bucket_mb, name),
                [plan.endpoint(r.receiver).url for r in routes],
                version,
                name,
                sender_host,
                pipelined,
            )
            for name, routes in by_transport.items()
        }
        results: dict[str, PushResult] = {name: push.result() for name, push in pushes.items()}
    buckets = max((result.tally.num_buckets for result in results.values()), default=0)
    metrics = {
        "transfer/bytes": 0.0,
        "transfer/buckets": float(buckets),
        "transfer/retries": 0.0,
        "transfer/failed_receivers": 0.0,
    }
    for name, result in results.items():
        moved = result.tally.num_bytes * len(by_transport[name])
        metrics[f"transfer/bytes/{name}"] = float(moved)
        metrics["transfer/bytes"] += moved
        metrics["transfer/retries"] += result.retried
        metrics["transfer/failed_receivers"] += len(result.failed)
    seconds = tally.metrics()["transfer/seconds"]
    metrics["transfer/seconds"] = seconds
    metrics["transfer/gbps"] = metrics["transfer/bytes"] / seconds / 1e9 if seconds > 0 else 0.0
    failed = _failed_engines(
        plan, {url: why(error) for result in results.values() for url, error in result.failed.items()}, version
    )
    updated = [url for url in engine_urls if url not in failed]
    return {"metrics": metrics, "updated": updated, "failed": failed}


def _failed_engines(plan: Plan, failed_receivers: dict[str, str], version: int) -> dict[str, str]:
    """A relay that failed names the engines behind it that did not commit; which did is asked of
    each of them (the version it serves), so no engine is claimed to hold what it does not."""
    from loongsage.inference.client import EngineClient, EngineError

    failed = {}
    for endpoint in plan.endpoints.values():
        if endpoint.url not in failed_receivers:
            continue
        if endpoint.role != "relay":
            failed[endpoint.url] = failed_receivers[endpoint.url]
            continue
        for url in engines_behind(plan, endpoint.name):
            try:
                served = EngineClient(url, timeout=30).get_weight_version()
            except EngineError as exc:
                served = f"unknown ({exc})"
            if served != str(version):
                failed[url] = f"through relay {endpoint.name} (serves version {served}): {failed_receivers[endpoint.url]}"
    return failed


def _routes_by_transport(plan: Plan, source: str, engine_urls: list[str]) -> dict[str, list[Route]]:
    wanted = set(engine_urls)
    known = {e.url for e in plan.by_role("engine")}
    unknown = sorted(wanted - known)
    if unknown:
        raise ValueError(f"the route plan has no route to {', '.join(unknown)}; it covers {', '.join(sorted(known))}")
    grouped: dict[str, list[Route]] = defaultdict(list)
    for route in plan.routes_from(source):
        receiver = plan.endpoint(route.receiver)
        if receiver.role == "engine" and receiver.url not in wanted:
            continue
        if route.shards != 1:
            raise NotImplementedError(
                f"route {route.sender} -> {route.receiver} carries share {route.shard}/{route.shards}: "
                "several sources are planned but only one sends yet"
            )
        if receiver.url is None:
            raise ValueError(f"{receiver.role} {receiver.name} has no URL: relays must be started before a push")
        grouped[route.transport].append(route)
    return dict(grouped)


def _bucket_maker(named: NamedTensors, bucket_mb: int | None, transport_name: str):
    size = (bucket_mb or get_transport(transport_name).bucket_mb) * 1024 * 1024
    return lambda: iter_buckets(named, size)


def local_plan(engine_urls: list[str], weight_sync: str, source_host: str) -> Plan:
    """The plan of a trainer nobody gave one (driven without a controller, as in tests): this
    machine's probe, the trainer's rank 0 as the source, engines named by URL; `weight_sync`
    "mesh" or the one transport allowed."""
    from loongsage.cluster.topology import gather, probe_node
    from loongsage.transfer.planner import plan_routes
    from loongsage.transfer.topology_model import TopologyModel

    topology = TopologyModel(gather([probe_node(addresses=[source_host, *LOOPBACK])]))
    source = Endpoint(SOURCE, "source", source_host)
    engines = [Endpoint(f"engine/{i}", "engine", urlparse(url).hostname or "", url=url) for i, url in enumerate(engine_urls)]
    transports = None if weight_sync == "mesh" else {weight_sync}
    return without_relays(plan_routes(topology, [source], engines, transports))


SOURCE = "trainer/0"  # the trainer rank that sends: rank 0 holds the gathered weights


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
