"""TrainGroup sends each rank the shard of the data-parallel index it reports, over real Ray
actors (stand-in workers: the sharding, not the training, is under test)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import ray

from loongsage.training import TrainerError, TrainGroup, group
from tests.integration.training.shard_recorder import ShardRecorder
from tests.samples import random_samples


def batch(n: int = 8):
    samples = random_samples(n, seed=0)
    for index, sample in enumerate(samples):
        sample.group_id = index
    return samples


def megatron_group(monkeypatch, answers: list, tp: int, dp: int, **trainer) -> TrainGroup:
    monkeypatch.setattr(group, "train_backend", lambda name: ShardRecorder)
    settings = SimpleNamespace(
        backend="megatron", megatron=SimpleNamespace(tp=tp, pp=1, dp=dp), micro_batch_size=2, num_threads=1, **trainer
    )
    return TrainGroup(json.dumps(answers), settings, SimpleNamespace(), seed=0)


@pytest.mark.parametrize(
    ("answers", "reported_by"),
    [
        ([0, 0, 1, 1], [0, 0, 0, 0, 2, 2, 2, 2]),
        ([1, 0, 1, 0], [1, 1, 1, 1, 0, 0, 0, 0]),
    ],
)
def test_tensor_parallel_peers_get_the_same_shard(ray_runtime, monkeypatch, answers, reported_by):
    trainer = megatron_group(monkeypatch, answers, tp=2, dp=2)
    try:
        metrics = trainer.train_step(batch())
        received = ray.get([worker.received.remote() for worker in trainer.workers])
        logprobs = trainer.compute_logprobs(batch())
    finally:
        trainer.shutdown()
    shards = [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert received == [shards[answer] for answer in answers]
    assert metrics == {"train/loss": 1.5, "train/samples": 4.0}
    # one rank per shard, in shard order: every sample once, in the batch's order
    assert [int(sample_id) for _, sample_id in logprobs] == list(range(8))
    assert [int(rank) for rank, _ in logprobs] == reported_by


def test_shards_split_by_the_data_parallel_size_named_in_the_message(ray_runtime, monkeypatch):
    trainer = megatron_group(monkeypatch, [0, 0, 1, 1], tp=2, dp=2, mini_batches=4)
    try:
        with pytest.raises(ValueError, match=r"7 samples does not divide into trainer.megatron.dp=2"):
            trainer.train_step(batch(7))
        with pytest.raises(
            ValueError,
            match=r"each data-parallel shard gets 3 samples \(6 / trainer.megatron.dp=2\), "
            r"which does not divide into trainer.mini_batches=4",
        ):
            trainer.train_step(batch(6))
    finally:
        trainer.shutdown()


def test_answers_that_leave_a_shard_untrained_end_the_group(ray_runtime, monkeypatch):
    killed = []
    end_ranks = TrainGroup._end_ranks

    def recording_end_ranks(self):
        killed.extend(self.workers)
        end_ranks(self)

    monkeypatch.setattr(TrainGroup, "_end_ranks", recording_end_ranks)
    with pytest.raises(TrainerError, match=r"data_rank\(\) answers, by rank, are \[0, 0, 0, 1\]; with trainer.megatron.dp=2"):
        megatron_group(monkeypatch, [0, 0, 0, 1], tp=2, dp=2)
    assert len(killed) == 4  # the group ended all its workers
