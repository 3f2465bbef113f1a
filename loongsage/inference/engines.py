"""The engine actors `rollout.engine` chooses from: an SGLang engine is one more entry.

An entry is a Ray actor class (what `@ray.remote` makes; a plain class is made one), one actor
per engine, constructed as `cls(model_path, engine_cfg, cpus)` and answering `start() -> base
URL` (serving SGLang's HTTP protocol there), `stop()`, `gpu_ids()` and `status() -> {"restarts":
int, "alive": bool, "failed": str | None}` (EngineFleet and its liveness probe call nothing else).
"""

from __future__ import annotations

import ray
from ray.actor import ActorClass

from loongsage.inference.embedded.actor import EmbeddedEngineActor
from loongsage.registry import Registry

ENGINES: Registry[ActorClass] = Registry("rollout engine")
ENGINES.register("embedded", EmbeddedEngineActor)
ENGINES.register_lazy("sglang", "loongsage.inference.sglang.actor:SglangEngineActor")


def engine_actor(name_or_path: str) -> ActorClass:
    """The Ray actor class `rollout.engine` names: a registered name or "package.module:Class"."""
    engine = ENGINES.get(name_or_path)
    return engine if isinstance(engine, ActorClass) else ray.remote(engine)
