"""GAE, the clipped value loss and explained variance against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from loongsage.algorithms.critic import CRITIC_ESTIMATORS, clipped_value_loss, explained_variance, gae, outcome_gae, reads_critic
from loongsage.algorithms.losses import Aggregation


def test_gae_hand_values():
    advantages, returns = gae(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.2, 0.4]), gamma=0.5, lam=0.5)
    # delta_2 = 1 - 0.4 = 0.6; delta_1 = 0.5 * 0.4 - 0.2 = 0; delta_0 = 0.5 * 0.2 - 0.5 = -0.4
    # A_2 = 0.6, A_1 = 0 + 0.25 * 0.6 = 0.15, A_0 = -0.4 + 0.25 * 0.15 = -0.3625; R = A + V
    torch.testing.assert_close(advantages, torch.tensor([-0.3625, 0.15, 0.6]))
    torch.testing.assert_close(returns, torch.tensor([0.1375, 0.35, 1.0]))


def test_undiscounted_gae_is_the_outcome_minus_each_value():
    advantages, returns = gae(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.2, 0.4]), gamma=1.0, lam=1.0)
    torch.testing.assert_close(advantages, torch.tensor([0.5, 0.8, 0.6]))
    torch.testing.assert_close(returns, torch.ones(3))


def test_outcome_gae_pays_each_reward_at_its_last_token_and_whitens_over_the_batch():
    values = [torch.tensor([0.5, 0.2]), torch.tensor([0.0]), torch.zeros(0)]
    raw, returns = outcome_gae(torch.tensor([1.0, 0.0, 1.0]), values, gamma=1.0, lam=1.0, normalize_std=False)
    torch.testing.assert_close(torch.cat(raw), torch.tensor([0.5, 0.8, 0.0]))
    torch.testing.assert_close(torch.cat(returns), torch.tensor([1.0, 1.0, 0.0]))
    assert raw[2].numel() == 0  # an episode without trained tokens has nothing to estimate
    whitened, _ = outcome_gae(torch.tensor([1.0, 0.0, 1.0]), values, gamma=1.0, lam=1.0)  # None: whitened
    # mean 13/30, unbiased std of (0.5, 0.8, 0) = 0.404145
    expected = (torch.tensor([0.5, 0.8, 0.0]) - 1.3 / 3) / (0.404145 + 1e-6)
    torch.testing.assert_close(torch.cat(whitened), expected, atol=1e-5, rtol=0)


def test_clipped_value_loss_hand_values_and_gradient():
    values = torch.tensor([[1.0, 0.0, 9.0]], requires_grad=True)
    old, returns, mask = torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([[2.0, 2.0, 0.0]]), torch.tensor([[1, 1, 0]])
    loss = clipped_value_loss(values, old, returns, mask, clip=0.2, aggregation=Aggregation())
    # clipped values 0.7, 0.3; token 0: 0.5 * max(1, 1.69) = 0.845 (clipped); token 1: 0.5 * max(4, 2.89) = 2
    assert loss.item() == pytest.approx((0.845 + 2.0) / 2)
    loss.backward()
    # the clipped token gets no gradient; the other (V - R) / 2 tokens; the untrained third none
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, -1.0, 0.0]]))


def test_explained_variance():
    returns = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(returns, returns) == pytest.approx(1.0)
    assert explained_variance(returns, torch.full((3,), 2.0)) == pytest.approx(0.0)
    assert explained_variance(returns, torch.tensor([3.0, 2.0, 1.0])) == pytest.approx(-3.0)
    # Every reward equal: returns (advantage + value, in float32) equal up to rounding.
    values = torch.randn(64, generator=torch.Generator().manual_seed(0)) * 3
    rounded = (torch.ones(64) - values) + values
    assert rounded.double().var(unbiased=False) > 0
    assert explained_variance(rounded, values) == 0.0
    assert explained_variance(torch.ones(3), torch.zeros(3)) == 0.0


def test_gae_is_the_critics_estimator():
    assert set(CRITIC_ESTIMATORS) == {"gae"} and reads_critic("gae") and not reads_critic("grpo")
