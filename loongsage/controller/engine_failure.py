"""A dead inference engine, said in one paragraph instead of every rollout thread's traceback.

The SGLang actor restarts its server process when it dies (rollout.sglang.max_restarts); an
engine is dead for good when its actor is gone (the embedded engine lives in its actor) or its
restarts are spent. Then the run cannot go on: the controller stops, names the engine and the
step, and points at the checkpoint to resume from. Which engine died is asked of its actor,
not guessed from the error that surfaced first (a dropped HTTP connection looks the same while
a process restarts)."""

from __future__ import annotations

from pathlib import Path

import ray

LIVENESS_TIMEOUT_S = 10.0  # an engine busy generating still answers a method call within this


class EngineDied(RuntimeError):
    def __init__(self, engines: list[str], step: int, checkpoint: Path | None, cause: BaseException | None = None):
        where = f"Last checkpoint: {checkpoint}" if checkpoint else "No checkpoint yet (the run starts over)"
        seen = f" (the first error it caused: {type(cause).__name__}: {_first_line(cause)})" if cause else ""
        super().__init__(
            f"inference engine {', '.join(engines)} died during step {step}{seen}. "
            f"The run stopped. {where}. "
            f"Its log says why it died (out of memory is the usual cause: lower rollout.max_running "
            f"or rollout.max_context)."
        )


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
        except ray.exceptions.RayActorError:
            statuses.append(None)
        except ray.exceptions.GetTimeoutError:
            statuses.append({})  # alive, only busy
    return statuses


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
