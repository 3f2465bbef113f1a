"""What every backend's rank does to its own process: cores, seeds, RNG state, the process group."""

from __future__ import annotations

import os
import random
import socket
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from loongsage.cluster.cpu_placement import pin_this_process
from loongsage.cluster.hosts import this_host
from loongsage.failpoints import dying_after_first
from loongsage.transfer.endpoints import source_name
from loongsage.transfer.routes import Plan
from loongsage.transfer.source_routes import SourceReport, send_routes

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Long enough for a slow rank to finish a checkpoint; a dead rank is caught by the group.
COLLECTIVE_TIMEOUT = timedelta(minutes=30)


def use_cores(cpus: list[int] | None, num_threads: int) -> None:
    """Disaggregated placement gives a rank its own cores (one thread each); else `num_threads`."""
    if cpus:
        pin_this_process(cpus)
    torch.set_num_threads(len(cpus) if cpus else num_threads)


def rendezvous_address() -> tuple[str, int]:
    """This host's address and a free port for the process group's TCP store."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return this_host(), sock.getsockname()[1]


def join_process_group(master_addr: str, master_port: int, rank: int, world_size: int, backend: str = "gloo") -> None:
    """`backend` "nccl" also binds this process to one GPU: the only one visible in a Ray actor
    given one, else the rank's (ranks spawned on one machine see them all)."""
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(
        backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=COLLECTIVE_TIMEOUT,
    )


def leave_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


class TrainRank:
    """What every backend's rank is given and does first: TrainGroup constructs one per rank as
    `cls(model_path, trainer, algo, seed, rank, cpus)`; it takes its cores and seeds its RNGs."""

    def __init__(self, model_path: str, trainer, algo, seed: int, rank: int, cpus: list[int] | None = None):
        use_cores(cpus, trainer.num_threads)
        self.model_path = Path(model_path)
        self.trainer, self.algo = trainer, algo
        self.seed, self.rank = seed, rank
        self.dtype = DTYPES[trainer.dtype]
        self.step = 0
        seed_everything(seed + rank)

    def warm_up(self) -> None:
        """What a spare process does ahead of its adoption: import what `setup` will need beyond
        the backend's own modules, which came with its class. Nothing, unless a backend says."""

    def pid(self) -> int:
        """This rank's process (the controller logs it: a rank to attach a profiler to, or to kill)."""
        return os.getpid()

    def rendezvous_address(self) -> tuple[str, int]:
        """This host's address and a free port for the process group's TCP store (asked of rank 0)."""
        return rendezvous_address()

    def weight_source(self) -> str | None:
        """This rank's host where it holds a full replica once the weights are gathered for a push
        (a source of the route plan), else None. Every rank does, unless a backend says otherwise."""
        return this_host()

    def send_to_engines(self, named, plan: dict, engine_urls: list[str], skip: list[str]) -> SourceReport | None:
        """This rank's part of a weight push (`rounds.run_update_round`, coordinated by TrainGroup):
        HF-named tensors, which every rank reads in lockstep (a collective gather), bucketed; a
        source of `plan` sends the buckets its routes carry. None from a rank the plan does not name."""
        named = dying_after_first(named, "push_weights", self.step, self.rank)
        route_plan = Plan.from_dict(plan)
        source = source_name(self.rank)
        if source not in route_plan.endpoints:
            for _ in named:  # the gathers of the tensors the sources are sending
                pass
            return None
        bucket_mb = self.trainer.weight_sync_bucket_mb
        return send_routes(route_plan, source, named, engine_urls, this_host(), bucket_mb, skip=skip)
