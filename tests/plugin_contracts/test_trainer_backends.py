"""Every `trainer.backend` is a worker class TrainGroup makes a Ray actor of, one per rank,
and calls the way TrainGroup calls it."""

from __future__ import annotations

import pytest

from loongsage.training.backends import TRAIN_BACKENDS
from tests.plugin_contracts.call_shapes import ANY, accepts, method_problems

# What loongsage.training.group.TrainGroup calls, with the positional arguments it passes.
TRAIN_GROUP_CALLS = {
    "rendezvous_address": (),
    "setup": (ANY, ANY),  # master_addr, master_port
    "train_step": (ANY, ANY),  # samples, policy_version
    "supervised_step": (ANY, ANY),  # samples, lr
    "compute_logprobs": (ANY,),  # samples
    "save_checkpoint": (ANY,),  # path
    "load_checkpoint": (ANY,),  # path
    "push_weights": (ANY, ANY),  # engine_urls, version
}


@pytest.mark.parametrize("name", sorted(TRAIN_BACKENDS))
def test_backend_is_constructed_and_called_the_way_train_group_does(name):
    backend = TRAIN_BACKENDS[name]
    assert isinstance(backend, type), f"{name}: a backend is a plain class (TrainGroup makes it a Ray actor)"
    # model_path, trainer settings, algorithm settings, seed, rank, cpus
    assert accepts(backend, ANY, ANY, ANY, ANY, ANY, ANY), f"{name}: constructor refuses TrainGroup's six arguments"
    assert method_problems(backend, TRAIN_GROUP_CALLS) == []
