"""TrainWorker in-process, as a 1-rank gloo group, on the tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from loongsage.config.schema import AlgorithmConfig, TrainerConfig
from loongsage.sample import Sample
from loongsage.training.fsdp import TrainWorker
from loongsage.training.objective import check_off_policy_inputs
from tests.samples import random_samples as _random_samples

METRIC_KEYS = {
    "train/loss",
    "train/pg_loss",
    "train/grad_norm",
    "train/mismatch_k3_kl",
    "train/entropy",
    "train/clip_frac",
    "train/lr",
    "train/tokens",
}


def random_samples(n: int, seed: int = 0) -> list[Sample]:
    return _random_samples(n, seed, partial_mask=True)


def capture_grads(worker: TrainWorker) -> dict[str, torch.Tensor]:
    """Filled with the (clipped) gradients the optimizer steps on."""
    grads: dict[str, torch.Tensor] = {}
    names = {p: n for n, p in worker.model.named_parameters()}

    def hook(optimizer, args, kwargs):
        grads.update({names[p]: p.grad.clone() for p in names})

    worker.optimizer.register_step_pre_hook(hook)
    return grads


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean"])
def test_grad_accumulation_equals_one_full_batch(make_worker, mode):
    samples = random_samples(8)
    algo = AlgorithmConfig(loss_aggregation=mode)
    full = make_worker(TrainerConfig(micro_batch_size=8), algo)
    full_grads = capture_grads(full)
    full_metrics = full.train_step(samples)
    accumulated = make_worker(TrainerConfig(micro_batch_size=3), algo)
    acc_grads = capture_grads(accumulated)
    acc_metrics = accumulated.train_step(samples)

    assert acc_metrics["train/grad_norm"] == pytest.approx(full_metrics["train/grad_norm"], rel=1e-5)
    assert acc_metrics["train/loss"] == pytest.approx(full_metrics["train/loss"], abs=1e-6)
    assert acc_grads.keys() == full_grads.keys()
    for name, grad in acc_grads.items():
        torch.testing.assert_close(grad, full_grads[name], rtol=1e-4, atol=1e-7, msg=name)


def test_loss_is_token_mean_over_the_whole_batch(make_worker):
    samples = random_samples(8)
    worker = make_worker(TrainerConfig(micro_batch_size=3), AlgorithmConfig(loss_aggregation="token_mean"))
    metrics = worker.train_step(samples)
    # On-policy, the PPO ratio is 1, so the loss is -sum(A * mask) / sum(mask).
    weighted = sum(s.advantage * sum(s.loss_mask) for s in samples)
    tokens = sum(sum(s.loss_mask) for s in samples)
    assert metrics["train/pg_loss"] == pytest.approx(-weighted / tokens, abs=1e-6)
    assert metrics["train/tokens"] == tokens
    micro_means = [
        -sum(s.advantage * sum(s.loss_mask) for s in chunk) / sum(sum(s.loss_mask) for s in chunk)
        for chunk in (samples[0:3], samples[3:6], samples[6:8])
    ]
    assert abs(sum(micro_means) / 3 - metrics["train/pg_loss"]) > 1e-3, "test batch too uniform to tell"


def test_compute_logprobs_aligns_with_a_plain_forward(make_worker):
    samples = random_samples(3)
    worker = make_worker(TrainerConfig(micro_batch_size=2))
    logprobs = worker.compute_logprobs(samples)
    model = worker.model
    for sample, values in zip(samples, logprobs):
        ids = torch.tensor([sample.prompt_ids + sample.response_ids])
        with torch.no_grad():
            logp = model(input_ids=ids).logits[0].log_softmax(-1)
        P = len(sample.prompt_ids)
        expected = [logp[P + j - 1, token].item() for j, token in enumerate(sample.response_ids)]
        assert values == pytest.approx(expected, abs=1e-5)


def test_mismatch_kl_vanishes_when_rollout_matches_trainer(make_worker):
    samples = random_samples(4)
    worker = make_worker(TrainerConfig(micro_batch_size=2))
    for sample, values in zip(samples, worker.compute_logprobs(samples)):
        sample.response_logprobs = values
    metrics = worker.train_step(samples)
    assert metrics["train/mismatch_k3_kl"] == pytest.approx(0.0, abs=1e-6)


def test_mini_batches_kl_and_warmup(make_worker):
    samples = random_samples(8)
    trainer = TrainerConfig(micro_batch_size=2, mini_batches=2, lr=1e-2, warmup_steps=2)
    worker = make_worker(trainer, AlgorithmConfig(kl_coef=0.1, entropy_coef=0.01))
    first = worker.train_step(samples)
    second = worker.train_step(samples)
    assert set(first) == METRIC_KEYS | {"train/kl"}
    assert (first["train/lr"], second["train/lr"]) == pytest.approx((5e-3, 1e-2))
    # The first step starts at the reference weights; by the second the policy has moved.
    assert first["train/kl"] < second["train/kl"]
    assert second["train/kl"] > 0
    assert worker.step == 2


def test_bfloat16_with_gradient_checkpointing(make_worker):
    worker = make_worker(TrainerConfig(dtype="bfloat16", gradient_checkpointing=True, lr=1e-2))
    metrics = worker.train_step(random_samples(4))
    assert {p.dtype for p in worker.model.parameters()} == {torch.bfloat16}
    assert all(value == value for value in metrics.values()), metrics  # no NaN
    assert metrics["train/grad_norm"] > 0


def test_supervised_step_lowers_the_nll_of_its_samples_and_leaves_the_rl_schedule_alone(make_worker):
    worker = make_worker(TrainerConfig(micro_batch_size=2, lr=1e-6, warmup_steps=4))
    samples = random_samples(4, seed=3)
    scheduled = worker.optimizer.param_groups[0]["lr"]
    first = worker.supervised_step(samples, lr=1e-2)
    for _ in range(3):
        last = worker.supervised_step(samples, lr=1e-2)
    assert last["train/loss"] < first["train/loss"] * 0.8  # a nll, fitted at a rate far above the RL one
    assert first["train/lr"] == 1e-2 and first["train/clip_frac"] == 0.0
    assert worker.optimizer.param_groups[0]["lr"] == scheduled and worker.step == 0
    # The nll is the mean over masked tokens of -log p, as an independent forward pass computes it.
    with torch.no_grad():
        worker.model.eval()
        nll, count = 0.0, 0
        for sample in samples:
            ids = torch.tensor([sample.prompt_ids + sample.response_ids])
            logp = torch.log_softmax(worker.model(input_ids=ids).logits[0, :-1], -1)
            targets = ids[0, 1:]
            picked = logp[torch.arange(len(targets)), targets][len(sample.prompt_ids) - 1 :]
            mask = torch.tensor(sample.loss_mask, dtype=torch.bool)
            nll, count = nll - float(picked[mask].sum()), count + int(mask.sum())
    after = worker.supervised_step(samples, lr=1e-12)
    assert after["train/loss"] == pytest.approx(nll / count, rel=1e-4)


IS_KEYS = {"train/is_weight_mean", "train/is_weight_max", "train/is_weight_min", "train/is_clip_frac", "train/is_mask_frac"}


def with_own_logprobs(worker: TrainWorker, samples: list[Sample], shift: float = 0.0) -> list[Sample]:
    """The samples with rollout logprobs = the worker's own (+ shift), as if it sampled them."""
    for sample, values in zip(samples, worker.compute_logprobs(samples)):
        sample.response_logprobs = [value + shift for value in values]
    return samples


def parameters(worker: TrainWorker) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in worker.model.named_parameters()}


def test_proximal_behaviour_on_own_logprobs_equals_recompute(make_worker):
    trainer = TrainerConfig(micro_batch_size=2, lr=1e-3)
    recompute = make_worker(trainer)
    samples = with_own_logprobs(recompute, random_samples(4))
    expected = recompute.train_step(samples)
    expected_params = parameters(recompute)
    behaviour = make_worker(trainer, AlgorithmConfig(proximal="behaviour"))
    metrics = behaviour.train_step(samples)
    assert metrics["train/loss"] == pytest.approx(expected["train/loss"], abs=1e-6)
    assert metrics["train/grad_norm"] == pytest.approx(expected["train/grad_norm"], rel=1e-4)
    for name, value in parameters(behaviour).items():
        torch.testing.assert_close(value, expected_params[name], rtol=1e-5, atol=1e-7, msg=name)


def test_token_mask_is_drops_every_token_of_far_off_rollouts(make_worker):
    algo = AlgorithmConfig(is_level="token", is_mode="mask", is_low=0.5, is_high=2.0)
    worker = make_worker(TrainerConfig(micro_batch_size=2, lr=1e-3), algo)
    # rollout logprobs 5 nats above the trainer's: w = exp(-5) = 0.0067 < is_low on every token
    samples = with_own_logprobs(worker, random_samples(4), shift=5.0)
    before = parameters(worker)
    metrics = worker.train_step(samples)
    assert IS_KEYS <= set(metrics)
    assert metrics["train/is_mask_frac"] == pytest.approx(1.0)
    assert metrics["train/is_clip_frac"] == 0.0
    assert metrics["train/is_weight_max"] == pytest.approx(math.exp(-5.0), rel=1e-3)
    assert metrics["train/grad_norm"] == 0.0
    for name, value in parameters(worker).items():
        assert torch.equal(value, before[name]), name


def test_interpolate_with_mini_batches_needs_no_extra_forward(make_worker, monkeypatch):
    samples = random_samples(8)
    for index, sample in enumerate(samples):
        sample.weight_versions = [2 + index % 2] * len(sample.response_ids)  # versions 2 and 3: one step stale or fresh
    trainer = TrainerConfig(micro_batch_size=2, mini_batches=2, lr=1e-3)

    def count_logprobs(worker: TrainWorker) -> list[int]:
        calls = []
        original = worker._logprobs
        monkeypatch.setattr(worker, "_logprobs", lambda *args: calls.append(1) or original(*args))
        return calls

    recompute = make_worker(trainer)
    with_own_logprobs(recompute, samples)
    recompute_calls = count_logprobs(recompute)
    recompute.train_step(samples, policy_version=3)
    assert len(recompute_calls) == 2  # one no-grad pass per mini-batch before the first update

    worker = make_worker(trainer, AlgorithmConfig(proximal="interpolate", is_level="token"))
    calls = count_logprobs(worker)
    metrics = worker.train_step(samples, policy_version=3)
    assert calls == []
    assert set(metrics) == METRIC_KEYS | IS_KEYS
    assert all(math.isfinite(value) for value in metrics.values()), metrics
    # The rollout logprobs are the starting weights' own: in the first mini-batch the proximal
    # policy is the current one (w = 1); in the second, the version-2 tokens' proximal logprobs
    # sit 2/3 of the way to the moved weights', so their weights spread around 1.
    assert metrics["train/is_weight_min"] < 1.0 < metrics["train/is_weight_max"]
    assert metrics["train/is_weight_mean"] == pytest.approx(1.0, abs=0.1)
    assert metrics["train/grad_norm"] > 0


@pytest.mark.parametrize(
    ("algo", "policy_version", "missing", "message"),
    [
        (
            AlgorithmConfig(proximal="behaviour"),
            None,
            "response_logprobs",
            "algorithm.proximal=behaviour needs the rollout logprobs of every sample; sample 3 has none",
        ),
        (
            AlgorithmConfig(is_level="sequence"),
            None,
            "response_logprobs",
            "algorithm.is_level=sequence needs the rollout logprobs of every sample; sample 3 has none",
        ),
        (AlgorithmConfig(proximal="interpolate"), None, "", "algorithm.proximal=interpolate needs train_step's policy_version"),
        (
            AlgorithmConfig(proximal="interpolate"),
            1,
            "weight_versions",
            "algorithm.proximal=interpolate needs the weight versions of every sample; sample 3 has none",
        ),
    ],
)
def test_off_policy_settings_name_what_a_sample_lacks(algo, policy_version, missing, message):
    samples = random_samples(4)
    for sample in samples:
        sample.weight_versions = [1] * len(sample.response_ids)
    if missing:
        setattr(samples[3], missing, [])
    with pytest.raises(ValueError, match=message):
        check_off_policy_inputs(samples, algo, policy_version)
    check_off_policy_inputs(samples, AlgorithmConfig(), None)  # recompute, no IS: nothing needed


def test_m2po_step_equals_training_on_the_samples_it_keeps(make_worker):
    trainer = TrainerConfig(micro_batch_size=3, lr=1e-3)
    kept = make_worker(trainer)
    samples = with_own_logprobs(kept, random_samples(6))
    expected_grads = capture_grads(kept)
    expected = kept.train_step(samples[:4])  # token_mean over only the on-policy samples' tokens
    # The last two were sampled by weights one nat away on every token: a second moment of 1 over
    # their tokens, far above 0.04 however many on-policy tokens (log-ratio 0) dilute it.
    for sample in samples[4:]:
        sample.response_logprobs = [value - 1.0 for value in sample.response_logprobs]
    worker = make_worker(trainer, AlgorithmConfig(stale_filter="m2po"))
    grads = capture_grads(worker)
    metrics = worker.train_step(samples)
    stale_tokens = sum(sum(sample.loss_mask) for sample in samples[4:])
    assert metrics["train/stale_filtered_frac"] == pytest.approx(stale_tokens / sum(sum(s.loss_mask) for s in samples))
    assert metrics["train/tokens"] == expected["train/tokens"]
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], rtol=1e-4, atol=1e-7, msg=name)


def test_opsm_drops_diverged_negative_episodes_and_keeps_the_denominator(make_worker):
    trainer = TrainerConfig(micro_batch_size=2, lr=1e-3)
    reference = make_worker(trainer)
    samples = with_own_logprobs(reference, random_samples(4), shift=0.5)  # mean log(pi_behav / pi_theta) 0.5 > 0.1
    for sample, advantage in zip(samples, [1.0, -1.0, 0.5, -2.0]):
        sample.advantage = advantage
    # Dropping a sequence is training it with advantage 0: same tokens in the denominator.
    zeroed = [Sample(**{**vars(s), "advantage": max(s.advantage, 0.0)}) for s in samples]
    expected_grads = capture_grads(reference)
    expected = reference.train_step(zeroed)
    worker = make_worker(trainer, AlgorithmConfig(stale_filter="opsm"))
    grads = capture_grads(worker)
    metrics = worker.train_step(samples)
    dropped = sum(sum(s.loss_mask) for s in samples[1::2])
    assert metrics["train/stale_filtered_frac"] == pytest.approx(dropped / sum(sum(s.loss_mask) for s in samples))
    assert metrics["train/tokens"] == expected["train/tokens"]
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], rtol=1e-4, atol=1e-7, msg=name)
