"""What each engine actor says of itself: gone for good, or how often it restarted its server.

The SGLang actor restarts its server process when it dies, and Ray restarts the embedded engine's
actor (both rollout.max_engine_restarts); an engine is dead for good when its actor is gone for
good or its restarts are spent. Which engine died is asked of its actor, not guessed from the error that
surfaced first (a dropped HTTP connection looks the same while a process restarts)."""

from __future__ import annotations

import ray

LIVENESS_TIMEOUT_S = 10.0  # an engine busy generating still answers a method call within this


def dead_engines(actors: list, urls: list[str]) -> list[str]:
    """`engine <index> (<url>)` for each engine whose Ray actor is gone or has given up restarting
    its server (then with the actor's reason)."""
    dead = []
    for index, status in enumerate(_statuses(actors)):
        where = urls[index] if index < len(urls) else "not started"
        if status is None:
            dead.append(f"{index} ({where})")
        elif status.get("failed"):
            dead.append(f"{index} ({where}: {status['failed']})")
    return dead


def engine_restarts(actors: list) -> int:
    """Server restarts over the run, all engines together (a dead actor counts none)."""
    return sum(status.get("restarts", 0) for status in _statuses(actors) if status)


def _statuses(actors: list) -> list[dict | None]:
    """Each actor's status(); None for an actor that is gone; {} for one too busy to answer."""
    probes = [actor.status.remote() for actor in actors]
    statuses: list[dict | None] = []
    for probe in probes:
        try:
            statuses.append(ray.get(probe, timeout=LIVENESS_TIMEOUT_S))
        except ray.exceptions.ActorUnavailableError:
            statuses.append({})  # Ray is restarting it (rollout.max_engine_restarts)
        except ray.exceptions.RayActorError:
            statuses.append(None)
        except ray.exceptions.GetTimeoutError:
            statuses.append({})  # alive, only busy (or still loading its model after a restart)
    return statuses
