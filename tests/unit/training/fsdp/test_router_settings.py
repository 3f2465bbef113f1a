"""trainer.moe.* on the fsdp backend, in-process on the tiny Qwen3-MoE: freeze_router keeps every
router as loaded while the rest trains; a dense model refuses both settings by name. (The
load-balancing loss it adds, aux_loss_coeff, is checked against megatron's step in
tests/integration/training/megatron/test_megatron_moe_trainer.py.)"""

from __future__ import annotations

import pytest
import torch

from loongsage.config.schema import AlgorithmConfig, MoeConfig, TrainerConfig
from loongsage.models.tiny import tiny_moe_dir
from loongsage.training.fsdp import TrainWorker
from tests.samples import random_samples


def test_freeze_router_keeps_the_routers_as_loaded():
    torch.set_num_threads(1)
    settings = TrainerConfig(micro_batch_size=4, lr=1e-3, moe=MoeConfig(freeze_router=True, aux_loss_coeff=0.5))
    worker = TrainWorker(str(tiny_moe_dir()), settings, AlgorithmConfig(), 0, 0)
    worker.setup(*worker.rendezvous_address())
    try:
        before = {name: param.detach().clone() for name, param in worker.model.named_parameters()}
        worker.train_step(random_samples(4, 0))
        after = dict(worker.model.named_parameters())
    finally:
        worker.close()
    routers = [name for name in before if name.endswith(".mlp.gate.weight")]
    assert len(routers) == 2
    for name, weights in before.items():
        assert torch.equal(after[name], weights) == (name in routers), name


@pytest.mark.parametrize(
    ("moe", "message"),
    [
        (MoeConfig(aux_loss_coeff=0.1), r"trainer.moe.aux_loss_coeff=0.1: the model \(llama\) has no experts"),
        (MoeConfig(freeze_router=True), r"trainer.moe.freeze_router=true: the model \(llama\) has no experts"),
    ],
    ids=["aux-loss", "freeze-router"],
)
def test_router_settings_with_a_dense_model_are_refused_by_name(moe, message, tiny_model_path):
    worker = TrainWorker(tiny_model_path, TrainerConfig(moe=moe), AlgorithmConfig(), 0, 0)
    try:
        with pytest.raises(ValueError, match=message):
            worker.setup(*worker.rendezvous_address())
    finally:
        worker.close()
