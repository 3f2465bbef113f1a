"""What a push reads from a plan beyond its routes, and the plan a push to some of its engines
follows: engines fed through relays get their routes straight from the sources instead
(`without_relays`), since a relay forwards to everything it feeds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from loongsage.transfer.routes import Endpoint, Plan


def plan_for_engines(plan: Plan, engine_urls: Sequence[str]) -> Plan:
    """The plan a push to `engine_urls` follows: the whole plan, or for some of its engines (a
    resync) their routes straight from the sources."""
    check_covered(plan, engine_urls)
    return plan if set(engine_urls) == {e.url for e in plan.by_role("engine")} else without_relays(plan)


def check_covered(plan: Plan, engine_urls: Sequence[str]) -> None:
    known = {e.url for e in plan.by_role("engine")}
    unknown = sorted(set(engine_urls) - known)
    if unknown:
        raise ValueError(f"the route plan has no route to {', '.join(unknown)}; it covers {', '.join(sorted(known))}")


def without_relays(plan: Plan) -> Plan:
    """Each engine fed through relays gets the route that brings its share out of a source
    instead, straight from that source."""
    relays = {e.name for e in plan.by_role("relay")}
    if not relays:
        return plan
    routes = [r for r in plan.routes if r.receiver not in relays and r.sender not in relays]
    for route in plan.routes:
        if route.sender in relays and route.receiver not in relays:
            routes.append(replace(plan.origin(route), receiver=route.receiver, share=route.share, shares=route.shares))
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


def relays_upstream_first(plan: Plan) -> list[Endpoint]:
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
