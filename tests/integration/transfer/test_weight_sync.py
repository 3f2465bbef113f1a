"""After a train step and a weight sync, the engine and the trainer are the same policy."""

from __future__ import annotations

import math

import pytest
import ray

from loongsage.config import AlgorithmConfig, TrainerConfig
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.actor import EmbeddedEngineActor
from loongsage.sample import Sample
from loongsage.training.group import TrainGroup

PROMPT = [1, 504, 3458, 314, 216, 28, 1000, 17]
RESPONSE = [2345, 17, 9000, 42, 315, 2]


def engine_logprobs(client: EngineClient, prompt: list[int], response: list[int]) -> list[float]:
    """Teacher-style scoring: no new tokens, logprobs of the whole given sequence."""
    out = client.generate(
        input_ids=prompt + response, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=0
    )
    scored = [entry[0] for entry in out["meta_info"]["input_token_logprobs"]]
    return scored[len(prompt) :]


def k3(a: list[float], b: list[float]) -> float:
    return sum(math.exp(x - y) - 1 - (x - y) for x, y in zip(a, b)) / len(a)


@pytest.fixture(scope="module")
def trainer_and_engine(ray_runtime, tiny_model_path):
    trainer = TrainGroup(tiny_model_path, TrainerConfig(micro_batch_size=2, lr=1e-2, num_threads=1), AlgorithmConfig(), seed=0)
    actor = EmbeddedEngineActor.remote(tiny_model_path, {"num_threads": 1})
    client = EngineClient(ray.get(actor.start.remote()))
    yield trainer, client
    ray.get(actor.stop.remote())
    trainer.shutdown()


def test_engine_matches_trainer_after_sync(trainer_and_engine):
    trainer, client = trainer_and_engine
    sample = Sample(prompt_ids=PROMPT, response_ids=RESPONSE, loss_mask=[1] * len(RESPONSE))
    before = engine_logprobs(client, PROMPT, RESPONSE)
    assert k3(trainer.compute_logprobs([sample])[0], before) < 1e-6

    # One real update with a strong learning rate: the policy moves visibly...
    batch = []
    for i, reward_sign in enumerate((1.0, -1.0)):
        batch.append(
            Sample(
                prompt_ids=PROMPT,
                response_ids=RESPONSE[: 3 + i],
                response_logprobs=before[: 3 + i],
                loss_mask=[1] * (3 + i),
                advantage=reward_sign,
            )
        )
    trainer.train_step(batch)
    trained = trainer.compute_logprobs([sample])[0]
    assert k3(trained, before) > 1e-4

    # ...and after the sync the engine serves exactly the trained policy, under the new version.
    trainer.push_weights([client.base_url], version=1)
    after = engine_logprobs(client, PROMPT, RESPONSE)
    assert client.get_weight_version() == "1"
    assert k3(trained, after) < 1e-6
    assert max(abs(x - y) for x, y in zip(trained, after)) < 1e-4
