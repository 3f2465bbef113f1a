"""Ray actor running one SGLang server process (rollout.engine=sglang): it launches the server
with SGLang's flags, returns its URL once it serves, restarts it when it dies, and stops it.

A restarted server listens on the same port, so the URL clients hold stays valid, and it carries
the same --weight-version as the first start: it serves the starting weights, whatever the
trainer pushed since, and says so in every response's `weight_version` (which is how the run
notices it must push the current weights again). `status()["restarts"]` counts the restarts.
After more than rollout.sglang.max_restarts deaths it is left dead and `status()["failed"]` says why.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from pathlib import Path

import ray

from loongsage.cluster.cpu_placement import pin_this_process
from loongsage.cluster.hosts import serving_host
from loongsage.cluster.placement import ray_gpu_ids
from loongsage.inference.sglang.config import EngineSettings, launch_spec
from loongsage.inference.sglang.flags import launch_env, launch_flags
from loongsage.inference.sglang.ports import engine_ports
from loongsage.inference.sglang.process import STOP_GRACE_S, ServerProcess, ServerStartError

log = logging.getLogger(__name__)

WATCH_EVERY_S = 0.5  # how often the watchdog looks whether the server still runs


@ray.remote
class SglangEngineActor:
    def __init__(self, model_path: str, engine_cfg: dict, cpus: list[int] | None = None):
        if cpus:  # the server process, started later, inherits the affinity
            pin_this_process(cpus)
        # Everything is checked and decided here, ports included, so a bad config fails at creation.
        self.settings = EngineSettings.from_dict(engine_cfg)
        sglang = self.settings.sglang
        self.name = f"sglang engine {sglang.index}"
        host = serving_host()
        port, nccl_port = engine_ports(sglang.index, host)
        spec = launch_spec(model_path, self.settings, host, port, nccl_port)
        self.url = f"http://{host}:{port}"
        self.argv = [*server_command(sglang.command), *launch_flags(spec)]
        threads = self.settings.num_threads or (len(cpus) if cpus else None)
        self.env = launch_env(os.environ, sglang.gpus, threads)
        log_dir = Path(sglang.log_dir) if sglang.log_dir else Path(tempfile.mkdtemp(prefix="loongsage-sglang-"))
        self.log_path = log_dir / f"engine-{sglang.index}.log"

        self._lock = threading.Lock()  # guards the fields below against the watchdog thread
        self._stopping = threading.Event()
        self._process: ServerProcess | None = None
        self._serving: ServerProcess | None = None  # the process that answered /health_generate
        self._restarts = 0
        self._deaths = 0
        self._failed: str | None = None
        self._watchdog: threading.Thread | None = None

    def start(self) -> str:
        """Launches the server and returns its base URL once GET /health_generate answers 200;
        raises (naming the engine, command, exit code and log tail) when it does not."""
        if self._watchdog is None:
            self._launch()
            log.info("%s serving on %s (pid %s, log %s)", self.name, self.url, self._process.pid, self.log_path)
            self._watchdog = threading.Thread(target=self._watch, name=f"{self.name} watchdog", daemon=True)
            self._watchdog.start()
        return self.url

    def status(self) -> dict:
        """restarts: servers started after a death; alive: a server runs and has answered since its
        start; failed: why the engine was given up, else None; pid: the current server's; log: its path."""
        with self._lock:
            process = self._process
            return {
                "restarts": self._restarts,
                "alive": process is not None and process is self._serving and process.alive(),
                "failed": self._failed,
                "pid": process.pid if process else None,
                "log": str(self.log_path),
            }

    def gpu_ids(self) -> list:
        """The GPU ids Ray gave this actor (diagnostics: did placement put it on its seat)."""
        return ray_gpu_ids()

    def stop(self) -> None:
        """The watchdog first (a server stopped on purpose is not restarted), then the server with
        its process group. Idempotent."""
        self._stopping.set()
        with self._lock:
            process = self._process
        if process is not None:
            process.stop()
        if self._watchdog is not None:
            # A restart in progress ends as soon as its process is gone.
            self._watchdog.join(timeout=STOP_GRACE_S * 2)

    def _launch(self) -> None:
        process = ServerProcess(self.argv, self.env, self.log_path, self.name)
        with self._lock:
            # Checked under the lock stop() reads the process with: either stop() sees this
            # process and stops it, or this sees stop() and launches nothing.
            if self._stopping.is_set():
                raise ServerStartError(f"{self.name} is stopping; not launching it")
            process.launch()
            self._process = process
        process.wait_ready(self.url, self.settings.sglang.startup_timeout_s)
        with self._lock:
            self._serving = process

    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_EVERY_S):
            if not self._process.alive() and not self._revive():
                return

    def _revive(self) -> bool:
        """The server died: start it again, same flags and port, until one serves (True) or the
        deaths exceed max_restarts (False, `failed` set). A start that fails is one more death."""
        max_restarts = self.settings.sglang.max_restarts
        while not self._stopping.is_set():
            dead = self._process
            dead.stop()  # what is left of its process group: a child may still hold the port or the device
            with self._lock:
                self._deaths += 1
            if self._stopping.is_set():
                return False
            log.error(
                "%s (pid %s) died with exit code %s (death %d; rollout.sglang.max_restarts=%d); log %s",
                self.name, dead.pid, dead.returncode, self._deaths, max_restarts, self.log_path,
            )  # fmt: skip
            if self._deaths > max_restarts:
                failed = (
                    f"{self.name} died {self._deaths} time(s), more than rollout.sglang.max_restarts={max_restarts}; "
                    f"not restarting it. Last exit code {dead.returncode}; log {self.log_path}, last lines:\n"
                    f"{dead.log_tail()}"
                )
                with self._lock:
                    self._failed = failed
                log.error("%s", failed)
                return False
            with self._lock:
                self._restarts += 1
            try:
                self._launch()
            except ServerStartError as exc:
                log.error("%s", exc)
                continue
            log.warning(
                "%s restarted on %s (pid %s, restart %d); it serves the starting weights (version %s) until the next push",
                self.name, self.url, self._process.pid, self._restarts, self.settings.weight_version,
            )  # fmt: skip
            return True
        return False


def server_command(command: tuple[str, ...]) -> list[str]:
    """`python` at the head of the command is this environment's interpreter: a Ray worker's PATH
    need not lead to the environment the run was started from (a venv that was never activated)."""
    head, *rest = command
    return [sys.executable, *rest] if head in ("python", "python3") else [head, *rest]
