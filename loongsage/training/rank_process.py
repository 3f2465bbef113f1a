"""What every backend's rank does to its own process: cores, seeds, RNG state, the process group."""

from __future__ import annotations

import random
import socket
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from loongsage.cluster.cpu_placement import pin_this_process
from loongsage.cluster.hosts import this_host
from loongsage.transfer.mesh import SOURCE, execute_plan, local_plan
from loongsage.transfer.routes import Plan

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
        self.weight_plan: Plan | None = None
        seed_everything(seed + rank)

    def rendezvous_address(self) -> tuple[str, int]:
        """This host's address and a free port for the process group's TCP store (asked of rank 0)."""
        return rendezvous_address()

    def set_weight_plan(self, plan: dict | None) -> None:
        """The route plan (`transfer.routes.Plan.to_dict()`) every later push follows; None: a plan
        for this machine is made at each push (`mesh.local_plan`)."""
        self.weight_plan = Plan.from_dict(plan) if plan is not None else None

    def send_to_engines(self, named, engine_urls: list[str], version: int) -> dict:
        """Rank 0's part of a weight sync: HF-named tensors, bucketed, to every engine along its
        route. Returns {"metrics", "updated" (engines holding `version`), "failed" (url: why)}."""
        plan = self.weight_plan or local_plan(engine_urls, self.trainer.weight_sync, this_host())
        return execute_plan(plan, SOURCE, named, engine_urls, version, this_host(), self.trainer.weight_sync_bucket_mb)
