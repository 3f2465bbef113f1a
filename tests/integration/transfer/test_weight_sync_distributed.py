"""Weight sync by gloo broadcast (trainer.weight_sync=gloo) into real embedded engines."""

from __future__ import annotations

import math
import shutil
import time

import pytest
import torch
from safetensors.torch import save_file

from loongsage.config import AlgorithmConfig, TrainerConfig
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.sample import Sample
from loongsage.training.group import TrainGroup
from loongsage.transfer import PushFailed, iter_buckets, push_weights
from tests.integration.inference.embedded.engine_support import running_engine

PROMPTS = [[1, 504, 3458, 314, 216, 28, 1000, 17], [1, 77, 9, 4000, 12]]
BUCKET_BYTES = 2**20  # several buckets for the tiny model (~13 MB): the per-bucket calls repeat


def greedy(url: str) -> list[tuple[list[int], list[float]]]:
    client = EngineClient(url)
    out = []
    for prompt in PROMPTS:
        answer = client.generate(input_ids=prompt, sampling_params={"max_new_tokens": 12, "temperature": 0}, return_logprob=True)
        out.append((answer["output_ids"], [entry[0] for entry in answer["meta_info"]["output_token_logprobs"]]))
    client.close()
    return out


def test_a_gloo_push_makes_two_engines_serve_the_pushed_weights(tiny_model_path, tmp_path_factory):
    generator = torch.Generator().manual_seed(7)
    named = [(name, t + 0.05 * torch.randn(t.shape, generator=generator)) for name, t in read_safetensors(tiny_model_path)]
    directory = tmp_path_factory.mktemp("perturbed")
    for name in ("config.json", "generation_config.json"):  # the architecture and the eos ids
        shutil.copy(f"{tiny_model_path}/{name}", directory)
    save_file(dict(named), str(directory / "model.safetensors"))

    with running_engine(tiny_model_path) as first, running_engine(tiny_model_path) as second:
        before = greedy(first.base_url)
        metrics = push_weights(named, [first.base_url, second.base_url], 7, BUCKET_BYTES, "gloo", "127.0.0.1")
        pushed = [greedy(first.base_url), greedy(second.base_url)]
        versions = [EngineClient(s.base_url).get_weight_version() for s in (first, second)]
        left = [EngineClient(s.base_url).get_server_info() for s in (first, second)]
    with running_engine(str(directory)) as reference:
        expected = greedy(reference.base_url)

    assert versions == ["7", "7"]
    assert [info["weight_update_groups"] for info in left] == [[], []]  # the push's group is destroyed on every engine
    assert [info["weight_update_session"] for info in left] == [None, None]  # and its sessions closed
    assert metrics["transfer/bytes"] == 2 * sum(t.numel() * t.element_size() for _, t in named)  # to each engine
    assert metrics["transfer/buckets"] == len(list(iter_buckets(named, BUCKET_BYTES))) > 1
    assert metrics["transfer/seconds"] > 0
    # The noise changes what the model says, and both engines now say what the perturbed model says.
    assert max(abs(a - b) for (_, lps), (_, ref) in zip(before, expected) for a, b in zip(lps, ref)) > 1e-3
    for engine in pushed:
        for (ids, lps), (ref_ids, ref_lps) in zip(engine, expected):
            assert ids == ref_ids
            assert max(abs(a - b) for a, b in zip(lps, ref_lps)) < 1e-6


def test_a_refused_bucket_fails_the_push_at_once_and_leaves_no_group(tiny_model_path):
    named = read_safetensors(tiny_model_path)
    bogus = ("model.layers.99.mlp.up_proj.weight", torch.zeros(4, 4))
    with running_engine(tiny_model_path) as first, running_engine(tiny_model_path) as second:
        urls = [first.base_url, second.base_url]
        start = time.monotonic()
        # Bucket 1 goes through; bucket 2 opens with a name the engines lack (and so does the retry's).
        with pytest.raises(PushFailed) as caught:
            push_weights([named[0], bogus, *named[1:]], urls, 3, 1, "gloo", "127.0.0.1")
        took = time.monotonic() - start
        assert sorted(caught.value.errors) == sorted(urls)
        for url, error in caught.value.errors.items():
            assert f"{url}/update_weights_from_distributed -> HTTP 400" in error
            assert bogus[0] in str(error) and "nothing was received" in str(error)
        assert took < 30, f"the push took {took:.0f} s to fail: it waited on the group instead of the answers"
        for url in urls:
            client = EngineClient(url)
            info = client.get_server_info()
            assert (info["weight_update_groups"], info["weight_update_session"]) == ([], None)
            # Bucket 1 was staged, not applied; the versioned last bucket never came, and the
            # session's end discarded it: the engines keep their weights and version.
            assert client.get_weight_version() == "default"
        # The engines are fine and take the next push.
        push_weights(named, urls, 4, BUCKET_BYTES, "gloo", "127.0.0.1")
        assert [EngineClient(url).get_weight_version() for url in urls] == ["4", "4"]


def k3(a: list[float], b: list[float]) -> float:
    return sum(math.exp(x - y) - 1 - (x - y) for x, y in zip(a, b)) / len(a)


def sample(client: EngineClient, prompt: list[int], seed: int, advantage: float) -> Sample:
    """A response the engine sampled, with its logprobs: what rollout hands the trainer."""
    answer = client.generate(
        input_ids=prompt,
        sampling_params={"max_new_tokens": 6, "temperature": 1.0, "sampling_seed": seed},
        return_logprob=True,
    )
    response = answer["output_ids"]
    return Sample(
        prompt_ids=prompt,
        response_ids=response,
        response_logprobs=[entry[0] for entry in answer["meta_info"]["output_token_logprobs"]],
        loss_mask=[1] * len(response),
        advantage=advantage,
    )


def test_trainer_and_engine_agree_after_a_gloo_sync(ray_runtime, tiny_model_path):
    """The K3 check: train, push over gloo, sample from the engine, and the trainer's next step
    finds the engine's logprobs equal to its own (fp32 on both sides)."""
    cfg = TrainerConfig(micro_batch_size=2, lr=1e-2, num_threads=1, weight_sync="gloo")
    trainer = TrainGroup(tiny_model_path, cfg, AlgorithmConfig(), seed=0)
    try:
        with running_engine(tiny_model_path) as engine:
            client = EngineClient(engine.base_url)
            first = [sample(client, PROMPTS[i % 2], seed=i, advantage=(-1.0) ** i) for i in range(4)]
            assert trainer.train_step(first)["train/mismatch_k3_kl"] < 1e-6  # same initial weights

            # The step moved the policy: an engine without the sync would be visibly off.
            probe = sample(client, PROMPTS[0], seed=99, advantage=0.0)
            stale = k3(trainer.compute_logprobs([probe])[0], probe.response_logprobs)
            assert stale > 1e-4

            report = trainer.push_weights([engine.base_url], version=1)
            assert report.updated == [engine.base_url] and report.failed == {}
            metrics = report.metrics
            assert metrics["transfer/buckets"] >= 1 and metrics["transfer/bytes"] > 0
            assert client.get_weight_version() == "1"
            assert client.get_server_info()["weight_update_groups"] == []

            second = [sample(client, PROMPTS[i % 2], seed=10 + i, advantage=(-1.0) ** i) for i in range(4)]
            assert trainer.train_step(second)["train/mismatch_k3_kl"] < 1e-6
    finally:
        trainer.shutdown()
