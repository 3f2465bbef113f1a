"""Ray actor hosting one embedded engine behind its SGLang-protocol HTTP server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ray

from loongsage.cluster.cpu_placement import pin_this_process
from loongsage.cluster.hosts import serving_host
from loongsage.cluster.placement import ray_gpu_ids

if TYPE_CHECKING:
    from loongsage.inference.embedded.server import EmbeddedServer


@ray.remote
class EmbeddedEngineActor:
    """Ray starts workers with OMP_NUM_THREADS=1; set `engine_cfg["num_threads"]` to the CPUs the
    actor was given to use more."""

    def __init__(self, model_path: str, engine_cfg: dict, cpus: list[int] | None = None):
        # The engine is imported here, in the actor's process: the controller imports this module
        # only to name the actor class, and would pay for the model code and the HTTP server.
        from loongsage.inference.embedded.engine import EngineConfig

        if cpus:  # before the engine starts any thread: they all inherit it
            pin_this_process(cpus)
        self.model_path = str(model_path)
        # Validate in the constructor so a bad key fails at actor creation, not at start().
        self.cfg = EngineConfig.from_dict(engine_cfg)
        self.server: EmbeddedServer | None = None

    def start(self) -> str:
        """Loads the model and serves it on a free port (loopback, or the node's address when the
        Ray cluster spans machines); returns the base URL."""
        if self.server is None:
            from loongsage.inference.embedded.engine import Engine
            from loongsage.inference.embedded.server import EmbeddedServer

            self.server = EmbeddedServer(Engine(self.model_path, self.cfg), host=serving_host())
            self.server.start()
        return self.server.base_url

    def status(self) -> dict:
        """The engine runs in this actor: while the actor answers, the engine is there (it is
        never restarted; a dead actor is a dead engine)."""
        return {"restarts": 0, "alive": self.server is not None, "failed": None}

    def gpu_ids(self) -> list:
        """The GPU ids Ray gave this engine (diagnostics: did placement put it on its seat)."""
        return ray_gpu_ids()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
