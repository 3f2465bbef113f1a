"""A source's part of an update round (`rounds.run_update_round`): its routes to the wanted
engines (and the relays), each group of routes (one transport, one share) on a thread of its
own, so a push to the engines on this machine over shm goes at the same time as the broadcast to
other machines. Every source streams every tensor (for a trainer rank that is a collective
gather), but keeps only the buckets of its own shares."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import torch

from loongsage.inference.weight_wire.layout import NamedTensors
from loongsage.transfer.buckets import share_buckets
from loongsage.transfer.channel import get_transport
from loongsage.transfer.plan_edits import check_covered, plan_for_engines
from loongsage.transfer.push import push_with_retry, why
from loongsage.transfer.routes import Plan


class RouteGroup(NamedTuple):
    """The routes out of a source that one stream carries: one transport, share `share` of `shares`."""

    transport: str
    share: int
    shares: int


@dataclass
class RouteReport:
    """What one group of a source's routes did; plain data, so a trainer rank can hand it to the
    round's coordinator through Ray."""

    transport: str
    receivers: list[str]
    num_bytes: int  # to each receiver
    retried: int
    failed: dict[str, str]  # receiver URL -> why, after its retry


@dataclass
class SourceReport:
    buckets: int  # in the whole push: every source buckets the weights the same way
    routes: list[RouteReport]


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
    """Receivers in `skip` could not open their session: no route goes to them."""
    plan = plan_for_engines(plan, engine_urls)
    groups = {group: [url for url in urls if url not in skip] for group, urls in route_groups(plan, source, engine_urls).items()}
    kept = share_buckets(named_tensors, plan_bucket_bytes(plan, bucket_mb), [(g.share, g.shares) for g in groups])
    with ThreadPoolExecutor(max_workers=max(len(groups), 1), thread_name_prefix="mesh-route") as pool:
        pushes = {
            group: pool.submit(
                push_with_retry,
                share_maker(kept.buckets, group.share, group.shares),
                urls,
                group.transport,
                sender_host,
                pipelined,
            )
            for group, urls in groups.items()
        }
        results = {group: push.result() for group, push in pushes.items()}
    routes = [
        RouteReport(
            group.transport,
            groups[group],
            result.tally.num_bytes,
            result.retried,
            {url: why(e) for url, e in result.failed.items()},
        )
        for group, result in results.items()
    ]
    return SourceReport(kept.total, routes)


def plan_bucket_bytes(plan: Plan, bucket_mb: float | None) -> int:
    """The push's one bucketing, the same in every source (a share is a set of bucket indices):
    `bucket_mb`, else the smallest default of the transports the sources' routes use."""
    if bucket_mb is None:
        sources = {e.name for e in plan.by_role("source")}
        bucket_mb = min((get_transport(r.transport).bucket_mb for r in plan.routes if r.sender in sources), default=64)
    return int(bucket_mb * 1024 * 1024)


def route_groups(plan: Plan, source: str, engine_urls: list[str]) -> dict[RouteGroup, list[str]]:
    """The receivers' URLs of each group of routes out of `source` that lead to a wanted engine
    (relays always: they forward to engines that are all wanted)."""
    check_covered(plan, engine_urls)
    wanted = set(engine_urls)
    groups: dict[RouteGroup, list[str]] = defaultdict(list)
    for route in plan.routes_from(source):
        receiver = plan.endpoint(route.receiver)
        if receiver.role == "engine" and receiver.url not in wanted:
            continue
        if receiver.url is None:
            raise ValueError(f"{receiver.role} {receiver.name} has no URL: relays must be started before a push")
        groups[RouteGroup(route.transport, route.share, route.shares)].append(receiver.url)
    return dict(groups)


def share_maker(kept: dict[int, NamedTensors], share: int, shares: int) -> Callable[[], Iterator[NamedTensors]]:
    """The buckets of share `share` of `shares`, in order, afresh at each call (a retry sends them again)."""
    return lambda: (kept[index] for index in sorted(kept) if index % shares == share)
