"""A dead inference engine, said in one paragraph instead of every rollout thread's traceback.

Until engines are restarted in place (a later issue), a run whose engine died cannot go on:
the controller stops, names the engine and the step, and points at the checkpoint to resume
from. Which engine died is asked of Ray, not guessed from the error that surfaced first
(a dropped HTTP connection looks the same as a bad request's)."""

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
            f"The run stopped; engines are not restarted yet. {where}. "
            f"Its Ray log says why it died (out of memory is the usual cause: lower rollout.max_running "
            f"or rollout.max_context)."
        )


def dead_engines(actors: list, urls: list[str]) -> list[str]:
    """`engine <index> (<url>)` for each engine whose Ray actor is gone."""
    probes = {index: actor.gpu_ids.remote() for index, actor in enumerate(actors)}
    dead = []
    for index, probe in probes.items():
        try:
            ray.get(probe, timeout=LIVENESS_TIMEOUT_S)
        except ray.exceptions.RayActorError:
            dead.append(f"{index} ({urls[index] if index < len(urls) else 'not started'})")
        except ray.exceptions.GetTimeoutError:
            pass  # alive, only busy
    return dead


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
