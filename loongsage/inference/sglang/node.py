"""One further node of an SGLang engine that spans nodes (node rank 1, 2, ...): a Ray actor on that
node's seat running the engine's server process there with its own --node-rank.

Such a process serves no HTTP; it joins node rank 0 at --dist-init-addr and runs its share of
the tensor-parallel ranks. The engine's actor (actor.py, node rank 0) starts these before its own
server, watches them with its own, and restarts all of them together when any dies: the node
ranks of one engine share collectives, so none of them outlives another.
"""

from __future__ import annotations

import os
from pathlib import Path

import ray

from loongsage.cluster.hosts import ray_gpu_ids
from loongsage.inference.sglang.flags import launch_env
from loongsage.inference.sglang.process import ServerProcess


@ray.remote
class SglangNodeActor:
    def __init__(self, argv: list[str], gpus: list | None, threads: int | None, log_path: str, name: str):
        self.process = ServerProcess(argv, launch_env(os.environ, gpus, threads), Path(log_path), name)

    def launch(self) -> int:
        """Starts the server process (once more after a stop); its pid."""
        self.process.launch()
        return self.process.pid

    def alive(self) -> bool:
        return self.process.alive()

    def exit_report(self) -> str:
        """How the process ended, with the tail of its log, for the engine's messages."""
        return f"exit code {self.process.returncode}; log {self.process.log_path}, last lines:\n{self.process.log_tail()}"

    def stop(self) -> None:
        self.process.stop()

    def gpu_ids(self) -> list:
        return ray_gpu_ids()
