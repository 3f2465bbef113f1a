"""TransferMesh's push: one update round (`run_update_round`, around `update_round.UpdateRound`)
in which every source of the plan runs its routes (`source_routes.send_routes`); it reports what
each route moved and which engines hold the new version. The sources are trainer ranks, each in
its own process (TrainGroup coordinates the round), or this process alone (`execute_plan`).

Engines are named by URL in the plan; a push to some of them (a resync of engines that came
back) runs only their routes, straight from the source (`plan_edits.without_relays`), since a
relay forwards to everything it feeds. Relays (`relay.py`) take their routes from the source as
an engine would, and say which receivers they could not reach when the round closes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from loongsage.transfer.plan_edits import engines_behind, plan_for_engines, relays_upstream_first
from loongsage.transfer.routes import Plan
from loongsage.transfer.source_routes import RouteReport, SourceReport, send_routes
from loongsage.transfer.update_round import UpdateRound


@dataclass
class RoundReport:
    metrics: dict[str, float]  # transfer/...
    updated: list[str]  # the engines that hold the round's version
    failed: dict[str, str]  # engine URL -> why it does not


def execute_plan(
    plan: Plan,
    source: str,
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    engine_urls: list[str],
    version: int | str,
    sender_host: str,
    bucket_mb: float | None = None,
    pipelined: bool = True,
) -> RoundReport:
    """One update round whose one source is this process (see `run_update_round`)."""
    return run_update_round(
        plan,
        engine_urls,
        version,
        lambda skip: [send_routes(plan, source, named_tensors, engine_urls, sender_host, bucket_mb, pipelined, skip)],
    )


def run_update_round(
    plan: Plan, engine_urls: list[str], version: int | str, send: Callable[[list[str]], list[SourceReport]]
) -> RoundReport:
    """One update round (`update_round`): the sessions open, `send(skip)` runs every source's
    routes (receivers in `skip` could not open theirs), then the relays close, every engine that
    got all its routes is committed to `version`, and the sessions close. A push to some of the
    engines (a resync) goes straight to them: a relay forwards to everything it feeds."""
    plan = plan_for_engines(plan, engine_urls)
    started = time.perf_counter()
    update = UpdateRound(engine_urls, [e.url for e in relays_upstream_first(plan)])
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
    return RoundReport(
        _metrics(routes, max((r.buckets for r in reports), default=0), seconds, failed),
        [url for url in engine_urls if url not in failed],
        failed,
    )


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
