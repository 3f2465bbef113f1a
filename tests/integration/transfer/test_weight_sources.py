"""Several trainer ranks send the weights (TransferMesh's sources): every rank that holds a full
replica once a push gathers the weights is a source, and the engines end up with exactly the
trainer's policy whichever rank sent which share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import ray

from loongsage.config import AlgorithmConfig, MegatronConfig, TrainerConfig
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.actor import EmbeddedEngineActor
from loongsage.sample import Sample
from loongsage.training.group import TrainGroup
from loongsage.transfer.endpoints import source_name
from loongsage.transfer.routes import Endpoint, Plan, Route
from tests.integration.transfer.test_weight_sync import PROMPT, RESPONSE, engine_logprobs, k3

SAMPLE = Sample(prompt_ids=PROMPT, response_ids=RESPONSE, loss_mask=[1] * len(RESPONSE))


@pytest.fixture(scope="module")
def engines(ray_runtime, tiny_model_path):
    actors = [EmbeddedEngineActor.remote(tiny_model_path, {"num_threads": 1}) for _ in range(2)]
    clients = [EngineClient(url) for url in ray.get([actor.start.remote() for actor in actors])]
    yield clients
    ray.get([actor.stop.remote() for actor in actors])


def train_visibly(trainer: TrainGroup, before: list[float]) -> list[float]:
    """One strong step (the engines, still on the old weights, would be visibly off); the trained logprobs."""
    batch = [
        Sample(prompt_ids=PROMPT, response_ids=RESPONSE[:n], response_logprobs=before[:n], loss_mask=[1] * n, advantage=sign)
        for n, sign in ((3, 1.0), (4, -1.0))
    ]
    trainer.train_step(batch)
    trained = trainer.compute_logprobs([SAMPLE, SAMPLE])[0]  # one per rank
    assert k3(trained, before) > 1e-4
    return trained


def assert_serves(clients: list[EngineClient], trained: list[float], version: int) -> None:
    for client in clients:
        served = engine_logprobs(client, PROMPT, RESPONSE)
        assert client.get_weight_version() == str(version)
        assert k3(trained, served) < 1e-6 and max(abs(x - y) for x, y in zip(trained, served)) < 1e-4, client.base_url


def two_sources_sharing_each_engine(trainer: TrainGroup, clients: list[EngineClient]) -> Plan:
    """Each engine takes bucket shares 0 and 1 of 2 from different ranks, over different transports."""
    sources = [Endpoint(source_name(rank), "source", host) for rank, host in sorted(trainer.weight_sources.items())]
    engines = [Endpoint(f"engine/{i}", "engine", "127.0.0.1", url=c.base_url) for i, c in enumerate(clients)]
    routes = [
        Route(sources[share].name, engine.name, transport, link, share, 2)
        for engine in engines
        for share, (transport, link) in enumerate((("shm", "host_shm"), ("gloo", "tcp")))
    ]
    plan = Plan({e.name: e for e in (*sources, *engines)}, routes)
    plan.check()
    return plan


@contextmanager
def two_sources(model_path: str, cfg: TrainerConfig) -> Iterator[TrainGroup]:
    cfg.weight_sync_bucket_mb = 1  # several buckets, so that two shares both hold some
    trainer = TrainGroup(model_path, cfg, AlgorithmConfig(), seed=0)
    try:
        assert sorted(trainer.weight_sources) == [0, 1]
        yield trainer
    finally:
        trainer.shutdown()


@pytest.mark.parametrize("strategy", ["fsdp2", "ddp"])
def test_every_fsdp_rank_is_a_source_and_two_of_them_fill_each_engine(engines, tiny_model_path, strategy):
    cfg = TrainerConfig(world_size=2, strategy=strategy, micro_batch_size=1, lr=1e-2, num_threads=1)
    urls = [c.base_url for c in engines]
    with two_sources(tiny_model_path, cfg) as trainer:
        trained = train_visibly(trainer, engine_logprobs(engines[0], PROMPT, RESPONSE))

        # No plan given: this machine's, in which the two ranks take turns feeding the engines.
        local = trainer._local_plan(urls)
        assert sorted(r.sender for r in local.routes) == ["trainer/0", "trainer/1"]
        report = trainer.push_weights(urls, version=1)
        assert report.updated == urls and report.failed == {}
        assert_serves(engines, trained, 1)
        whole = report.metrics["transfer/bytes"] / 2  # the model's bytes: each engine got it once

        trained = train_visibly(trainer, trained)
        trainer.set_weight_plan(two_sources_sharing_each_engine(trainer, engines))
        report = trainer.push_weights(urls, version=2)
        assert report.updated == urls and report.failed == {}
        assert_serves(engines, trained, 2)
        metrics = report.metrics
        # Each engine got each bucket once: one share from each rank, none twice, nothing missing.
        assert metrics["transfer/bytes"] == 2 * whole
        # (The shares are uneven: the tiny model's embedding is most of it, alone in bucket 0.)
        assert metrics["transfer/bytes/shm"] > 0 and metrics["transfer/bytes/gloo"] > 0
        assert metrics["transfer/bytes/shm"] + metrics["transfer/bytes/gloo"] == metrics["transfer/bytes"]
        assert metrics["transfer/buckets"] >= 2


def test_the_first_rank_of_each_megatron_replica_is_a_source(engines, tiny_model_path):
    cfg = TrainerConfig(backend="megatron", megatron=MegatronConfig(dp=2), micro_batch_size=1, lr=1e-2, num_threads=1)
    urls = [c.base_url for c in engines]
    with two_sources(tiny_model_path, cfg) as trainer:
        trained = train_visibly(trainer, engine_logprobs(engines[0], PROMPT, RESPONSE))
        trainer.set_weight_plan(two_sources_sharing_each_engine(trainer, engines))
        report = trainer.push_weights(urls, version=3)
        assert report.updated == urls and report.failed == {}
        assert_serves(engines, trained, 3)
