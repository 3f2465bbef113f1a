"""The train-worker classes `trainer.backend` chooses from: a Megatron backend is one more entry.

An entry is a plain class (TrainGroup makes it a Ray actor), one instance per data-parallel
rank, constructed as `cls(model_path, trainer, algo, seed, rank, cpus)` and implementing
`loongsage.training.protocol.TrainBackend`.
"""

from __future__ import annotations

from loongsage.registry import Registry
from loongsage.training.fsdp.worker import TrainWorker

TRAIN_BACKENDS: Registry[type] = Registry("trainer backend")
TRAIN_BACKENDS.register("fsdp", TrainWorker)


def train_backend(name_or_path: str) -> type:
    """The worker class `trainer.backend` names: a registered name or "package.module:Class"."""
    return TRAIN_BACKENDS.get(name_or_path)
