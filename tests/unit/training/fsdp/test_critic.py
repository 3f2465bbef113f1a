"""The fsdp backend's critic (algorithm.advantage=gae): values from a zero head, a value loss that
pulls them toward the returns, and a checkpoint that resumes bit-exact."""

from __future__ import annotations

import pytest
import torch

from loongsage.algorithms.critic import outcome_gae
from loongsage.config.schema import AlgorithmConfig, CriticConfig, TrainerConfig
from loongsage.controller.episodes import assign_critic_advantages
from tests.samples import random_samples

GAE = AlgorithmConfig(advantage="gae")
TRAINER = TrainerConfig(micro_batch_size=2, lr=1e-3, critic=CriticConfig(lr=1e-3))


def with_gae(worker, seed: int = 0):
    samples = random_samples(4, seed, partial_mask=True)
    for sample, reward in zip(samples, [1.0, 0.0, 1.0, 0.0]):
        sample.reward = reward
    metrics = assign_critic_advantages(samples, worker.compute_values(samples), outcome_gae, GAE)
    return samples, metrics


def distance_to_returns(worker, samples) -> float:
    values = worker.compute_values(samples)
    trained = [(v, r) for s, row in zip(samples, values) for v, r, m in zip(row, s.returns, s.loss_mask) if m]
    return sum(abs(v - r) for v, r in trained) / len(trained)


def test_a_fresh_critic_values_zero_and_learns_toward_the_returns(make_worker):
    worker = make_worker(TRAINER, GAE)
    samples, metrics = with_gae(worker)
    assert all(set(s.values) == {0.0} and len(s.values) == len(s.response_ids) for s in samples)
    assert metrics["train/explained_variance"] == 0.0  # 1 - Var(R - 0) / Var(R)
    # zero values and undiscounted GAE: each trained token's return is its episode's reward
    assert all(r == (s.reward if m else 0.0) for s in samples for r, m in zip(s.returns, s.loss_mask))
    before = distance_to_returns(worker, samples)
    first = worker.train_step(samples)
    later = [worker.train_step(samples) for _ in range(3)]
    # 0.5 * token mean of (0 - R)^2: the rewarded episodes' share of the trained tokens, halved
    rewarded = sum(sum(s.loss_mask) for s in samples if s.reward) / sum(sum(s.loss_mask) for s in samples)
    assert first["train/value_loss"] == pytest.approx(0.5 * rewarded)
    assert later[-1]["train/value_loss"] < first["train/value_loss"]
    assert distance_to_returns(worker, samples) < before


def test_the_critics_checkpoint_resumes_bit_exact(make_worker, tmp_path):
    checkpoint = str(tmp_path / "step1")
    worker = make_worker(TRAINER, GAE)
    first, _ = with_gae(worker, seed=1)
    worker.train_step(first)
    worker.save_checkpoint(checkpoint)
    second, _ = with_gae(worker, seed=2)
    expected = worker.train_step(second)
    expected_values = worker.compute_values(second)

    resumed = make_worker(TRAINER, GAE)
    assert resumed.load_checkpoint(checkpoint) == 1
    assert resumed.train_step(second) == expected
    assert resumed.compute_values(second) == expected_values
    state = resumed.critic.optimizer.state_dict()["state"]
    assert state and all(int(s["step"]) == 2 for s in state.values())


def test_a_critic_needs_its_part_of_the_checkpoint_and_a_policy_alone_has_no_values(make_worker, tmp_path):
    plain = make_worker(TRAINER)
    with pytest.raises(ValueError, match="compute_values needs a critic"):
        plain.compute_values(random_samples(2))
    plain.save_checkpoint(str(tmp_path / "plain"))
    worker = make_worker(TRAINER, GAE)
    with pytest.raises(FileNotFoundError, match="has no critic/: it was saved by a run without a critic"):
        worker.load_checkpoint(str(tmp_path / "plain"))
    assert torch.equal(worker.critic.model.score.weight, torch.zeros_like(worker.critic.model.score.weight))
