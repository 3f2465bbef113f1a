"""Run a body on every rank of a real Megatron trainer: one spawned process per rank, a gloo
group between them, the rank's MegatronWorker handed to the body; results come back per rank.

Spawned, not in the test process: megatron-core keeps its parallel state in module globals
and cpu_shims patches torch process-wide, neither of which should leak into other tests.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from loongsage.config.parallel import train_ranks
from loongsage.config.schema import AlgorithmConfig, TrainerConfig


def run_ranks(
    model_path: str, trainer: TrainerConfig, body: Callable[[Any], Any], out_dir: Path, algo: AlgorithmConfig | None = None
) -> list[Any]:
    """`body(worker)` on every rank after setup; a module-level function (it is pickled by name)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ranks = train_ranks(trainer)
    args = (model_path, trainer, algo or AlgorithmConfig(), body, port, str(out_dir))
    mp.spawn(_rank_main, args=args, nprocs=ranks, join=True)
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(ranks)]


def _rank_main(rank: int, model_path, trainer, algo, body, port: int, out_dir: str) -> None:
    from loongsage.training.megatron.worker import MegatronWorker

    torch.set_num_threads(1)
    worker = MegatronWorker(model_path, trainer, algo, seed=0, rank=rank)
    worker.setup("127.0.0.1", port)
    try:
        result = body(worker)
    finally:
        worker.close()
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


def hf_gradients(worker) -> dict[str, torch.Tensor]:
    """The reduced gradients of the last step, gathered and HF-named like the weights (rank 0;
    empty elsewhere). Collective. Reads megatron's DDP grad buffers (`main_grad`), so the
    optimizer must not shard them (distributed_optimizer=False) for the values to be whole."""
    from loongsage.training.megatron.convert import hf_weights

    params = list(worker.model.module.parameters())
    weights = [param.data for param in params]
    for param in params:
        param.data = param.main_grad
    try:
        return {name: tensor.clone() for name, tensor in hf_weights(worker.model.module, worker.spec)}
    finally:
        for param, data in zip(params, weights):
            param.data = data
