"""The train-worker classes `trainer.backend` chooses from.

An entry is a plain class (TrainGroup makes it a Ray actor), one instance per rank,
constructed as `cls(model_path, trainer, algo, seed, rank, cpus)` and implementing
`loongsage.training.protocol.TrainBackend`. `loongsage.config.parallel.train_ranks` says how
many ranks a trainer runs, `data_parallel_size` over how many shards a batch is split.

megatron is registered by import path: importing megatron-core takes seconds, so only a run
that chooses it imports it (on the first lookup of the name).
"""

from __future__ import annotations

from loongsage.registry import Registry
from loongsage.training.fsdp.worker import TrainWorker

TRAIN_BACKENDS: Registry[type] = Registry("trainer backend")
TRAIN_BACKENDS.register("fsdp", TrainWorker)
TRAIN_BACKENDS.register_lazy("megatron", "loongsage.training.megatron.worker:MegatronWorker")


def train_backend(name_or_path: str) -> type:
    """The worker class `trainer.backend` names: a registered name or "package.module:Class"."""
    return TRAIN_BACKENDS.get(name_or_path)
