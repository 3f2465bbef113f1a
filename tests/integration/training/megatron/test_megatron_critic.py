"""The megatron backend's critic (algorithm.advantage=gae) over real gloo groups: at tp=2 (its head
under sequence parallelism) and at pp=2 (its head on the last stage) it takes the fsdp backend's
critic step, and at dp=2 its part of the checkpoint resumes bit-exact (the data-parallel split is
the policy's, tested in test_megatron_trainer)."""

from __future__ import annotations

import pytest

from loongsage.algorithms.critic import outcome_gae
from loongsage.config.schema import AlgorithmConfig, CriticConfig, MegatronConfig, TrainerConfig
from loongsage.controller.episodes import assign_critic_advantages
from tests.integration.training.megatron.megatron_workers import run_ranks
from tests.samples import random_samples

GAE = AlgorithmConfig(advantage="gae")
UNCLIPPED = 1e9


def gae_samples(seed: int):
    """Samples as a fresh critic (values 0) sends them to training: rewards 1, 0, 1, 0, ..."""
    samples = random_samples(8, seed=seed, partial_mask=True)
    for index, sample in enumerate(samples):
        sample.reward = float(index % 2 == 0)
    assign_critic_advantages(samples, [[0.0] * len(s.response_ids) for s in samples], outcome_gae, GAE)
    return samples


SAMPLES, LATER = gae_samples(3), gae_samples(4)


def trainer(backend: str = "megatron", **layout) -> TrainerConfig:
    settings = dict(micro_batch_size=2, lr=1e-3, max_grad_norm=UNCLIPPED, num_threads=1, critic=CriticConfig(lr=1e-2))
    if backend == "fsdp":
        return TrainerConfig(**settings)
    return TrainerConfig(backend="megatron", megatron=MegatronConfig(distributed_optimizer=False, **layout), **settings)


def my_shard(worker, samples):
    size = len(samples) // worker.layout.dp_size
    return samples[worker.data_rank() * size : (worker.data_rank() + 1) * size]


def critic_step(worker) -> dict:
    shard = my_shard(worker, SAMPLES)
    before = worker.compute_values(shard)
    metrics = worker.train_step(shard)
    return {"before": before, "value_loss": metrics["train/value_loss"], "after": worker.compute_values(shard)}


@pytest.fixture
def fsdp_step(tiny_model_path):
    from loongsage.training.fsdp import TrainWorker

    worker = TrainWorker(tiny_model_path, trainer("fsdp"), GAE, 0, 0)
    worker.setup(*worker.rendezvous_address())
    try:
        before = worker.compute_values(SAMPLES)
        metrics = worker.train_step(SAMPLES)
        return {"before": before, "value_loss": metrics["train/value_loss"], "after": worker.compute_values(SAMPLES)}
    finally:
        worker.close()


@pytest.mark.parametrize("layout", [{"tp": 2}, {"pp": 2}], ids=["tp2", "pp2"])
def test_the_megatron_critic_takes_the_fsdp_critics_step(layout, fsdp_step, tiny_model_path, tmp_path):
    """At tp=2 the head runs under sequence parallelism; at pp=2 it sits on the last stage only."""
    ranks = run_ranks(tiny_model_path, trainer(**layout), critic_step, tmp_path, GAE)
    assert all(v == 0.0 for row in fsdp_step["before"] for v in row)  # a zero head
    for result in ranks:
        assert result["value_loss"] == pytest.approx(fsdp_step["value_loss"], rel=1e-5)
    after = ranks[-1]["after"]  # every tensor-parallel rank, and the last stage, hold the whole batch
    assert len(after) == len(fsdp_step["after"])
    for got, expected in zip(after, fsdp_step["after"]):
        assert got == pytest.approx(expected, abs=1e-5)
    assert any(abs(v) > 1e-3 for row in after for v in row)  # the critic moved


def save_after_one_step(checkpoint: str, worker) -> dict:
    worker.train_step(my_shard(worker, SAMPLES))
    worker.save_checkpoint(checkpoint)
    second = worker.train_step(my_shard(worker, LATER))
    return {"second": second, "after": worker.compute_values(my_shard(worker, LATER))}


def resume_then_step(checkpoint: str, worker) -> dict:
    worker.load_checkpoint(checkpoint)
    second = worker.train_step(my_shard(worker, LATER))
    return {"second": second, "after": worker.compute_values(my_shard(worker, LATER))}


def test_the_megatron_critics_checkpoint_resumes_bit_exact(tiny_model_path, tmp_path):
    from functools import partial

    checkpoint = str(tmp_path / "ckpt")
    uninterrupted = run_ranks(tiny_model_path, trainer(dp=2), partial(save_after_one_step, checkpoint), tmp_path / "a", GAE)
    resumed = run_ranks(tiny_model_path, trainer(dp=2), partial(resume_then_step, checkpoint), tmp_path / "b", GAE)
    assert (tmp_path / "ckpt" / "critic" / "megatron" / "metadata.json").is_file()
    for got, expected in zip(resumed, uninterrupted):
        assert got["second"]["train/value_loss"] == expected["second"]["train/value_loss"]
        assert got["after"] == expected["after"]
