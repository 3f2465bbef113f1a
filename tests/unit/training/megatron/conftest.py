"""megatron-core in the test process: one gloo rank with tp = pp = 1."""

from __future__ import annotations

import pytest

RNG_SEED = 1234


@pytest.fixture(scope="module")
def megatron_single_rank(tmp_path_factory):
    """A 1-rank gloo group and megatron's parallel state for the module's tests; torn down after
    them, so other modules can set up their own."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    from loongsage.training.megatron import cpu_shims

    created = not dist.is_initialized()
    if created:
        store = tmp_path_factory.mktemp("gloo") / "rendezvous"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    cpu_shims.install()
    ps.initialize_model_parallel(1, 1)
    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker.reset()
    tracker.add("model-parallel-rng", RNG_SEED)  # attention forks it, even without dropout
    tracker.add(tensor_parallel.get_expert_parallel_rng_tracker_name(), RNG_SEED + 1)
    yield
    ps.destroy_model_parallel()
    if created:
        dist.destroy_process_group()
