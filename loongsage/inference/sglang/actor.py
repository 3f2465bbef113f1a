"""Ray actor running one SGLang server process (rollout.engine=sglang): it launches the server
with SGLang's flags, returns its URL once it serves, restarts it when it dies, and stops it.

A restarted server listens on the same port, so the URL clients hold stays valid, and it carries
the same --weight-version as the first start: it serves the starting weights, whatever the
trainer pushed since, and says so in every response's `weight_version` (which is how the run
notices it must push the current weights again). `status()["restarts"]` counts the restarts.
After more than rollout.max_engine_restarts deaths it is left dead and `status()["failed"]` says why.

An engine spanning nodes (its seat has followers) runs one server process per node: this actor's
is node rank 0, which serves HTTP, and an SglangNodeActor on each further node's seat runs node
rank 1, 2, ... with the same flags (--nnodes, --node-rank, and --dist-init-addr at this node's
rendezvous port). They start before node rank 0, which waits for them, and a death of any of
them restarts them all, counted as one death of the engine.
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
from loongsage.cluster.hosts import ray_gpu_ids, serving_host
from loongsage.inference.sglang.config import EngineSettings, launch_spec
from loongsage.inference.sglang.flags import launch_env, launch_flags
from loongsage.inference.sglang.node import SglangNodeActor
from loongsage.inference.sglang.ports import engine_ports
from loongsage.inference.sglang.process import STOP_GRACE_S, ServerProcess, ServerStartError

log = logging.getLogger(__name__)

WATCH_EVERY_S = 0.5  # how often the watchdog looks whether the server still runs
NODE_CALL_TIMEOUT_S = 30.0  # for a further node's actor to answer (launch, alive, stop)


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
        port, nccl_port, rendezvous_port = engine_ports(sglang.index, host)
        dist_init_addr = f"{host}:{rendezvous_port}" if sglang.nnodes > 1 else None

        def argv(node_rank: int) -> list[str]:
            spec = launch_spec(model_path, self.settings, host, port, nccl_port, node_rank, dist_init_addr)
            return [*server_command(sglang.command), *launch_flags(spec)]

        self.url = f"http://{host}:{port}"
        self.argv = argv(0)
        self.threads = self.settings.num_threads or (len(cpus) if cpus else None)
        self.env = launch_env(os.environ, sglang.gpus, self.threads)
        log_dir = Path(sglang.log_dir) if sglang.log_dir else Path(tempfile.mkdtemp(prefix="loongsage-sglang-"))
        self.log_path = log_dir / f"engine-{sglang.index}.log"
        self._node_argvs = [argv(rank) for rank in range(1, sglang.nnodes)]
        self._nodes: list = []  # SglangNodeActor per further node, made at each launch
        self._node_pids: list[int] = []

        self._lock = threading.Lock()  # guards the fields below against the watchdog thread
        self._stopping = threading.Event()
        self._process: ServerProcess | None = None
        self._serving: ServerProcess | None = None  # the process that answered /health_generate
        self._restarts = 0
        self._deaths = 0
        self._failed: str | None = None
        self._node_down = False  # a further node's server died (the watchdog restarts them all)
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
        start (and every further node's runs); failed: why the engine was given up, else None; pid:
        the current server's; node_pids: the further nodes'; log: its path."""
        with self._lock:
            process = self._process
            return {
                "restarts": self._restarts,
                "alive": process is not None and process is self._serving and process.alive() and not self._node_down,
                "failed": self._failed,
                "pid": process.pid if process else None,
                "node_pids": list(self._node_pids),  # the further nodes' servers (node rank 1, ...)
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
        self._stop_nodes()
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
            self._launch_nodes()  # first: node rank 0 waits for them at --dist-init-addr
            process.launch()
            self._process = process
            self._node_down = False
        try:
            process.wait_ready(self.url, self.settings.sglang.startup_timeout_s)
        except ServerStartError:
            self._stop_nodes()
            raise
        with self._lock:
            self._serving = process

    def _launch_nodes(self) -> None:
        """A fresh SglangNodeActor per further node on its seat, each running its node rank."""
        sglang = self.settings.sglang
        self._nodes = [
            SglangNodeActor.options(**follower["ray_options"]).remote(
                argv,
                list(follower["gpus"]) if follower["gpus"] is not None else None,
                self.threads,
                str(self.log_path.with_name(f"engine-{sglang.index}-node{rank}.log")),
                f"{self.name} node rank {rank}",
            )
            for rank, (follower, argv) in enumerate(zip(sglang.followers, self._node_argvs), start=1)
        ]
        self._node_pids = ray.get([node.launch.remote() for node in self._nodes], timeout=NODE_CALL_TIMEOUT_S)

    def _stop_nodes(self) -> None:
        """Every further node's server, then its actor (a node whose actor is gone has nothing left)."""
        nodes, self._nodes = self._nodes, []
        if not nodes:
            return
        try:
            ray.get([node.stop.remote() for node in nodes], timeout=NODE_CALL_TIMEOUT_S + STOP_GRACE_S)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        for node in nodes:
            ray.kill(node)

    def _nodes_alive(self) -> bool:
        if not self._nodes:
            return True
        try:
            return all(ray.get([node.alive.remote() for node in self._nodes], timeout=NODE_CALL_TIMEOUT_S))
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return False

    def _dead_nodes(self) -> str:
        """Which further nodes' servers ended, and how (for the death's log line)."""
        reports = []
        for rank, node in enumerate(self._nodes, start=1):
            try:
                if not ray.get(node.alive.remote(), timeout=NODE_CALL_TIMEOUT_S):
                    reports.append(f"node rank {rank}: {ray.get(node.exit_report.remote(), timeout=NODE_CALL_TIMEOUT_S)}")
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
                reports.append(f"node rank {rank}: its actor is gone ({type(exc).__name__})")
        return "\n".join(reports)

    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_EVERY_S):
            if self._process.alive() and self._nodes_alive():
                continue
            with self._lock:
                self._node_down = True
            if not self._revive():
                return

    def _revive(self) -> bool:
        """The server died: start it again, same flags and port, until one serves (True) or the
        deaths exceed max_restarts (False, `failed` set). A start that fails is one more death."""
        max_restarts = self.settings.sglang.max_restarts
        while not self._stopping.is_set():
            dead = self._process
            nodes = self._dead_nodes()
            dead.stop()  # what is left of its process group: a child may still hold the port or the device
            self._stop_nodes()  # the node ranks share collectives: they restart together
            with self._lock:
                self._deaths += 1
            if self._stopping.is_set():
                return False
            log.error(
                "%s (pid %s) died with exit code %s (death %d; rollout.max_engine_restarts=%d); log %s%s",
                self.name, dead.pid, dead.returncode, self._deaths, max_restarts, self.log_path,
                f"\nfurther nodes that ended:\n{nodes}" if nodes else "",
            )  # fmt: skip
            if self._deaths > max_restarts:
                failed = (
                    f"{self.name} died {self._deaths} time(s), more than rollout.max_engine_restarts={max_restarts}; "
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
