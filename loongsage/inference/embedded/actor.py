"""Ray actor hosting one embedded engine behind its SGLang-protocol HTTP server."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import ray

from loongsage.cluster.cpu_placement import pin_this_process
from loongsage.cluster.hosts import ray_gpu_ids, serving_host

if TYPE_CHECKING:
    from loongsage.inference.embedded.server import EmbeddedServer


@ray.remote
class EmbeddedEngineActor:
    """Ray starts workers with OMP_NUM_THREADS=1; set `engine_cfg["num_threads"]` to the CPUs the
    actor was given to use more.

    The engine lives in this actor's process, so a death of either is a death of the engine. The
    fleet creates the actor with Ray's max_restarts (rollout.max_engine_restarts): Ray starts a new
    process with the same arguments, which serves again at once on the port of the first (kept in
    a file named by the actor's id, which Ray keeps across restarts) with the starting weights,
    version 0, so the run's engine roster holds it back until the published weights are pushed."""

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
        self.lives = ActorLives(ray.get_runtime_context().get_actor_id())
        if ray.get_runtime_context().was_current_actor_reconstructed:
            self.lives.restarted()
            self.start()

    def start(self) -> str:
        """Loads the model and serves it on a free port (loopback, or the node's address when the
        Ray cluster spans machines), or a restarted actor's first port; returns the base URL."""
        if self.server is None:
            from loongsage.inference.embedded.engine import Engine
            from loongsage.inference.embedded.server import EmbeddedServer

            self.server = EmbeddedServer(Engine(self.model_path, self.cfg), host=serving_host(), port=self.lives.port())
            self.server.start()
            self.lives.serving_on(self.server.port)
        return self.server.base_url

    def status(self) -> dict:
        """While the actor answers, the engine is there; `restarts`: Ray's restarts of it."""
        return {"restarts": self.lives.restarts(), "alive": self.server is not None, "failed": None}

    def gpu_ids(self) -> list:
        """The GPU ids Ray gave this engine (diagnostics: did placement put it on its seat)."""
        return ray_gpu_ids()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        self.lives.forget()


class ActorLives:
    """What an actor's next life needs of its earlier ones (its port, how often it restarted), in a
    file of this node's temporary directory named by the actor's id."""

    def __init__(self, actor_id: str):
        self.path = Path(tempfile.gettempdir()) / "loongsage-actor-lives" / f"{actor_id}.json"

    def port(self) -> int:
        """The port an earlier life served on; 0 (any free port) in the first."""
        return self._read().get("port", 0)

    def restarts(self) -> int:
        return self._read().get("restarts", 0)

    def serving_on(self, port: int) -> None:
        self._write({**self._read(), "port": port})

    def restarted(self) -> None:
        self._write({**self._read(), "restarts": self.restarts() + 1})

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    def _write(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(record))
