"""Every `algorithm.policy_loss` takes the keywords the trainer's objective passes (the
PolicyLoss protocol) and returns (scalar loss, metrics holding clip_frac)."""

from __future__ import annotations

import inspect

import pytest
import torch

from loongsage.algorithms.losses import Aggregation
from loongsage.algorithms.policy_losses import POLICY_LOSSES, PolicyLoss
from tests.plugin_contracts.call_shapes import ANY, accepts

KEYWORDS = [name for name in inspect.signature(PolicyLoss.__call__).parameters if name != "self"]


def test_the_protocol_names_what_the_objective_passes():
    assert KEYWORDS == ["logprobs", "old_logprobs", "advantages", "mask", "clip_low", "clip_high", "aggregation", "is_weights"]


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_loss_takes_the_shared_keywords(name):
    assert accepts(POLICY_LOSSES[name], **dict.fromkeys(KEYWORDS, ANY))


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
@pytest.mark.parametrize("is_weights", [None, torch.full((2, 3), 0.5)])
def test_loss_returns_a_differentiable_scalar_and_clip_frac(name, is_weights):
    logprobs = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -0.7, -1.1]], requires_grad=True)
    loss, metrics = POLICY_LOSSES[name](
        logprobs=logprobs,
        old_logprobs=logprobs.detach() - 0.4,
        advantages=torch.tensor([1.0, -1.0]),
        mask=torch.tensor([[1, 1, 0], [1, 1, 1]]),
        clip_low=0.2,
        clip_high=0.28,
        aggregation=Aggregation(),
        is_weights=is_weights,
    )
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    assert logprobs.grad is not None and logprobs.grad.abs().sum() > 0
    assert 0.0 <= metrics["clip_frac"] <= 1.0
