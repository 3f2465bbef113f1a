"""Every `trainer.backend` is a worker class TrainGroup makes a Ray actor of, one per rank,
and calls the way TrainGroup calls it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from loongsage.training.backends import TRAIN_BACKENDS
from tests.plugin_contracts.call_shapes import ANY, accepts, method_problems

# What loongsage.training.group.TrainGroup calls, with the positional arguments it passes.
TRAIN_GROUP_CALLS = {
    "rendezvous_address": (),
    "setup": (ANY, ANY),  # master_addr, master_port
    "data_rank": (),  # after setup: which data-parallel shard this rank trains on
    "train_step": (ANY, ANY),  # samples, policy_version
    "supervised_step": (ANY, ANY),  # samples, lr
    "compute_logprobs": (ANY,),  # samples
    "save_checkpoint": (ANY,),  # path
    "load_checkpoint": (ANY,),  # path
    "weight_source": (),  # after setup: this rank's host if it holds a full replica for a push
    "push_weights": (ANY, ANY, ANY),  # route plan (a dict), engine_urls, receivers to skip
}


@pytest.mark.parametrize("name", sorted(TRAIN_BACKENDS))
def test_backend_is_constructed_and_called_the_way_train_group_does(name):
    backend = TRAIN_BACKENDS[name]
    assert isinstance(backend, type), f"{name}: a backend is a plain class (TrainGroup makes it a Ray actor)"
    # model_path, trainer settings, algorithm settings, seed, rank, cpus
    assert accepts(backend, ANY, ANY, ANY, ANY, ANY, ANY), f"{name}: constructor refuses TrainGroup's six arguments"
    assert method_problems(backend, TRAIN_GROUP_CALLS) == []


def test_listing_the_backends_imports_no_backend_that_is_not_chosen():
    # megatron-core takes seconds to import: a run (or a config check) that does not choose it never pays.
    script = (
        "import sys\n"
        "from loongsage.training.backends import TRAIN_BACKENDS\n"
        "assert 'megatron' in TRAIN_BACKENDS and sorted(TRAIN_BACKENDS) == ['fsdp', 'megatron'], sorted(TRAIN_BACKENDS)\n"
        "from loongsage.config import Config, check\n"
        "check(Config())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'megatron' or m.startswith('loongsage.training.megatron')))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
