"""The engine actors `rollout.engine` chooses from: an SGLang engine is one more entry.

An entry is a Ray actor class (what `@ray.remote` makes; a plain class is made one), one actor
per engine, constructed as `cls(model_path, engine_cfg, cpus)` and answering `start() -> base
URL` (serving SGLang's HTTP protocol there), `stop()`, `gpu_ids()` and `status() -> {"restarts":
int, "alive": bool, "failed": str | None}` (EngineFleet and its liveness probe call nothing else).

Restarts (rollout.max_engine_restarts): Ray restarts the embedded engine's actor (the engine lives
in its process, and comes back on its first port); the SGLang actor restarts its server process
itself. An engine given by import path is not restarted: nothing says it would come back on the
URL the run knows. Its death stops the run with EngineDied, and the fleet says so at its start.
"""

from __future__ import annotations

import ray
from ray.actor import ActorClass

from loongsage.inference.embedded.actor import EmbeddedEngineActor
from loongsage.registry import Registry

ENGINES: Registry[ActorClass] = Registry("rollout engine")
ENGINES.register("embedded", EmbeddedEngineActor)
ENGINES.register_lazy("sglang", "loongsage.inference.sglang.actor:SglangEngineActor")
# Engines that live in their actor's process, so Ray restarts the actor when it dies
# (rollout.max_engine_restarts); the SGLang actor restarts its server process itself.
RESTARTED_BY_RAY = frozenset({"embedded"})
RESTARTS_ITS_SERVER = frozenset({"sglang"})


def is_restarted(name_or_path: str) -> bool:
    """Whether rollout.max_engine_restarts applies to `rollout.engine=name_or_path`."""
    return name_or_path in RESTARTED_BY_RAY | RESTARTS_ITS_SERVER


def restart_options(name_or_path: str, max_restarts: int) -> dict:
    """The Ray actor options that restart an engine of `rollout.engine=name_or_path`."""
    return {"max_restarts": max_restarts} if name_or_path in RESTARTED_BY_RAY else {}


def engine_actor(name_or_path: str) -> ActorClass:
    """The Ray actor class `rollout.engine` names: a registered name or "package.module:Class"."""
    engine = ENGINES.get(name_or_path)
    return engine if isinstance(engine, ActorClass) else ray.remote(engine)
