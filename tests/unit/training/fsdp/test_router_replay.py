"""R3 on the fsdp backend, in-process on the tiny Qwen3-MoE: train/routing_mismatch counts the
token x layer top-k sets the trainer routes otherwise than the engine did, and with
algorithm.routing_replay the trainer's forward routes exactly as the engine did."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from loongsage.config.schema import AlgorithmConfig, TrainerConfig
from loongsage.models.tiny import tiny_moe_dir
from loongsage.training.fsdp import TrainWorker
from tests.routing_samples import engine_routing, shifted, with_routing
from tests.samples import random_samples

EXPERTS = 4


@pytest.fixture
def make_worker(make_worker):
    """A worker of the tiny MoE, replaying the engine's routing or not."""
    return lambda replay: make_worker(
        TrainerConfig(micro_batch_size=4), AlgorithmConfig(routing_replay=replay), model_path=str(tiny_moe_dir())
    )


def test_the_engines_own_routing_is_no_mismatch_and_replaying_it_changes_nothing(make_worker):
    samples = random_samples(4, 0)
    routed = with_routing(samples, engine_routing(str(tiny_moe_dir()), samples))
    metrics = make_worker(replay=False).train_step(routed)
    assert metrics["train/routing_mismatch"] == 0.0
    replayed = make_worker(replay=True).train_step(routed)
    assert replayed["train/routing_mismatch"] == 0.0
    assert replayed["train/loss"] == pytest.approx(metrics["train/loss"], abs=1e-7)


def test_differing_routing_is_counted_and_replayed(make_worker):
    samples = random_samples(4, 1)
    engine, fraction = shifted(engine_routing(str(tiny_moe_dir()), samples), every=3, experts=EXPERTS)
    routed = with_routing(samples, engine)
    plain = make_worker(replay=False)
    before = plain.compute_logprobs(routed)
    assert plain.train_step(routed)["train/routing_mismatch"] == pytest.approx(fraction)

    replaying = make_worker(replay=True)
    picked = []
    model = replaying.model.module if hasattr(replaying.model, "module") else replaying.model
    hooks = [layer.mlp.gate.register_forward_hook(lambda _m, _a, o: picked.append(o[2])) for layer in model.model.layers]
    replayed_logprobs = replaying.compute_logprobs(routed)
    for hook in hooks:
        hook.remove()
    # The forward routed each sample's positions (but the padding and the last) as the engine did.
    per_position = torch.cat(picked, dim=-1).reshape(len(samples), -1, len(model.model.layers) * 2)
    for row, routing in enumerate(engine):
        np.testing.assert_array_equal(per_position[row, : len(routing)].numpy(), routing)
    assert any(a != pytest.approx(b, abs=1e-6) for x, y in zip(before, replayed_logprobs) for a, b in zip(x, y))
    assert replaying.train_step(routed)["train/routing_mismatch"] == pytest.approx(fraction)


def test_a_dense_model_has_no_routing_metric(tiny_model_path):
    worker = TrainWorker(tiny_model_path, TrainerConfig(micro_batch_size=4), AlgorithmConfig(), 0, 0)
    worker.setup(*worker.rendezvous_address())
    try:
        assert "train/routing_mismatch" not in worker.train_step(random_samples(4, 0))
    finally:
        worker.close()


def test_replay_without_the_engines_routing_is_refused_by_name(make_worker):
    with pytest.raises(ValueError, match="algorithm.routing_replay=true but sample 0 carries no routed_experts"):
        make_worker(replay=True).train_step(random_samples(4, 0))
