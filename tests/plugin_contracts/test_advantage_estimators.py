"""Every `algorithm.advantage` is called by the controller as
`estimator(rewards, group_ids, normalize_std=...)` (None: the estimator's own choice) and returns
one float advantage per sample."""

from __future__ import annotations

import pytest
import torch

from loongsage.algorithms.advantages import ADVANTAGE_ESTIMATORS, get_advantage
from tests.plugin_contracts.call_shapes import ANY, accepts


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_estimator_takes_the_controllers_call(name):
    assert accepts(ADVANTAGE_ESTIMATORS[name], ANY, ANY, normalize_std=ANY)


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
@pytest.mark.parametrize("normalize_std", [None, False])
def test_estimator_gives_one_finite_advantage_per_sample_of_interleaved_uneven_groups(name, normalize_std):
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0])
    group_ids = torch.tensor([3, 7, 3, 7, 3])
    advantages = get_advantage(name)(rewards, group_ids, normalize_std=normalize_std)
    assert advantages.shape == rewards.shape and advantages.is_floating_point()
    assert torch.isfinite(advantages).all()
