"""R3 on the fsdp backend, in-process on the tiny Qwen3-MoE: train/routing_mismatch counts the
token x layer top-k sets the trainer routes otherwise than the engine did, and with
algorithm.routing_replay the trainer's forward routes exactly as the engine did."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from loongsage.config.schema import AlgorithmConfig, TrainerConfig
from loongsage.models.tiny import tiny_moe_dir
from loongsage.sample import Sample
from loongsage.training.fsdp import TrainWorker
from tests.samples import random_samples


@pytest.fixture
def make_worker():
    workers = []

    def make(replay: bool) -> TrainWorker:
        while workers:
            workers.pop().close()
        worker = TrainWorker(str(tiny_moe_dir()), TrainerConfig(micro_batch_size=4), AlgorithmConfig(routing_replay=replay), 0, 0)
        worker.setup(*worker.rendezvous_address())
        workers.append(worker)
        return worker

    torch.set_num_threads(1)
    yield make
    for worker in workers:
        worker.close()


def _own_routing(worker: TrainWorker, samples: list[Sample]) -> list[np.ndarray]:
    """Per sample, the experts the worker's model routes each position but the last to
    [tokens - 1, layers * k], as an engine would return them."""
    model = worker.model.module if hasattr(worker.model, "module") else worker.model
    return [_routed(model, sample.prompt_ids + sample.response_ids)[:-1].numpy().astype(np.int32) for sample in samples]


def _routed(model, ids: list[int]) -> torch.Tensor:
    picked = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda _m, _a, o: picked.append(o[2])) for layer in model.model.layers]
    with torch.no_grad():
        model(torch.tensor([ids]))
    for hook in hooks:
        hook.remove()
    return torch.cat(picked, dim=-1)


def _with_routing(samples: list[Sample], routing: list[np.ndarray]) -> list[Sample]:
    for sample, routed in zip(samples, routing):
        sample.routed_experts = routed
    return samples


def _shifted(routing: list[np.ndarray], every: int) -> tuple[list[np.ndarray], int]:
    """Every `every`-th row of each layer moved to other experts: (the routing, rows changed)."""
    changed, out = 0, []
    for routed in routing:
        routed = routed.copy()
        rows = routed[::every]
        routed[::every] = (rows + 1) % 4  # 4 experts: a permutation, so every changed set differs
        changed += rows.size // 2  # top-2 per layer: one (token, layer) set per 2 ids
        out.append(routed)
    return out, changed


def test_the_engines_own_routing_is_no_mismatch_and_replaying_it_changes_nothing(make_worker):
    samples = random_samples(4, 0)
    plain = make_worker(replay=False)
    routing = _own_routing(plain, samples)
    metrics = plain.train_step(_with_routing(random_samples(4, 0), routing))
    assert metrics["train/routing_mismatch"] == 0.0
    replaying = make_worker(replay=True)
    replayed = replaying.train_step(_with_routing(random_samples(4, 0), routing))
    assert replayed["train/routing_mismatch"] == 0.0
    assert replayed["train/loss"] == pytest.approx(metrics["train/loss"], abs=1e-7)


def test_differing_routing_is_counted_and_replayed(make_worker):
    samples = random_samples(4, 1)
    plain = make_worker(replay=False)
    own = _own_routing(plain, samples)
    engine, changed = _shifted(own, every=3)
    rows = sum(r.size for r in own) // 2
    before = plain.compute_logprobs(_with_routing(random_samples(4, 1), engine))
    metrics = plain.train_step(_with_routing(random_samples(4, 1), engine))
    assert metrics["train/routing_mismatch"] == pytest.approx(changed / rows)

    replaying = make_worker(replay=True)
    routed = []
    model = replaying.model.module if hasattr(replaying.model, "module") else replaying.model
    hooks = [layer.mlp.gate.register_forward_hook(lambda _m, _a, o: routed.append(o[2])) for layer in model.model.layers]
    replayed_logprobs = replaying.compute_logprobs(_with_routing(random_samples(4, 1), engine))
    for hook in hooks:
        hook.remove()
    # The forward routed each sample's positions (but the padding and the last) as the engine did.
    layers = len(model.model.layers)
    per_position = torch.cat(routed, dim=-1).reshape(4, -1, layers * 2)
    for row, routing in enumerate(engine):
        np.testing.assert_array_equal(per_position[row, : len(routing)].numpy(), routing)
    assert any(a != pytest.approx(b, abs=1e-6) for x, y in zip(before, replayed_logprobs) for a, b in zip(x, y))
    assert replaying.train_step(_with_routing(random_samples(4, 1), engine))["train/routing_mismatch"] == pytest.approx(
        changed / rows
    )


def test_a_dense_model_has_no_routing_metric(tiny_model_path):
    worker = TrainWorker(tiny_model_path, TrainerConfig(micro_batch_size=4), AlgorithmConfig(), 0, 0)
    worker.setup(*worker.rendezvous_address())
    try:
        assert "train/routing_mismatch" not in worker.train_step(random_samples(4, 0))
    finally:
        worker.close()
