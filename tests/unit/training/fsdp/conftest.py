"""The fsdp backend's TrainWorker in-process, as a 1-rank gloo group."""

from __future__ import annotations

import pytest
import torch

from loongsage.config.schema import AlgorithmConfig, TrainerConfig
from loongsage.training.fsdp import TrainWorker


@pytest.fixture
def make_worker(tiny_model_path):
    """Build a set-up worker; only one process group can live in a process at a time."""
    workers = []

    def make(trainer: TrainerConfig, algo: AlgorithmConfig | None = None, model_path: str | None = None) -> TrainWorker:
        """`model_path`: None is the tiny dense model."""
        algo = algo if algo is not None else AlgorithmConfig()
        while workers:
            workers.pop().close()
        worker = TrainWorker(model_path or tiny_model_path, trainer, algo, seed=0, rank=0)
        worker.setup(*worker.rendezvous_address())
        workers.append(worker)
        return worker

    torch.set_num_threads(1)
    yield make
    for worker in workers:
        worker.close()
