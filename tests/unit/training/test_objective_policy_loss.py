"""The trainer's objective uses the policy loss `algorithm.policy_loss` names, passing the
PolicyLoss keywords; the default is PPO-clip."""

from __future__ import annotations

import torch

from loongsage.algorithms.losses import token_logprobs
from loongsage.algorithms.policy_losses import ppo_clip_loss
from loongsage.config.schema import AlgorithmConfig
from loongsage.training.batch import PackedBatch
from loongsage.training.objective import micro_objective
from loongsage.training.token_scores import FullVocabScores

CALLS: list[dict] = []


def recording_loss(**kwargs):
    """A policy loss reached by import path: the mean logprob of masked tokens, and what it was given."""
    CALLS.append(kwargs)
    masked = kwargs["logprobs"] * kwargs["mask"]
    return -masked.sum() / kwargs["mask"].sum(), {"clip_frac": 0.25}


def batch() -> PackedBatch:
    input_ids = torch.tensor([[1, 2, 3, 4], [4, 3, 2, 1]])
    return PackedBatch(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        position_ids=torch.arange(4).repeat(2, 1),
        first_column=0,
        loss_mask=torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]]),
        advantages=torch.tensor([[0.0, 1.0, 1.0], [0.0, -1.0, -1.0]]),
        rollout_logprobs=None,
        token_versions=None,
        response_spans=[(1, 3), (1, 2)],
        episode_share=torch.ones(2),
    )


def test_default_policy_loss_is_ppo_clip():
    logits, packed = torch.randn(2, 3, 6), batch()
    objective = micro_objective(FullVocabScores(logits), packed, torch.full((2, 3), -1.5), None, AlgorithmConfig())
    logprobs = token_logprobs(logits, packed.targets)
    expected, info = ppo_clip_loss(logprobs, torch.full((2, 3), -1.5), packed.advantages, packed.loss_mask)
    assert objective.pg_loss == expected.item() and objective.clip_frac == info["clip_frac"]


def test_a_policy_loss_by_import_path_is_called_with_the_shared_keywords():
    CALLS.clear()
    logits, packed = torch.randn(2, 3, 6, requires_grad=True), batch()
    old = torch.full((2, 3), -1.5)
    algo = AlgorithmConfig(policy_loss=f"{__name__}:recording_loss", clip_low=0.1, clip_high=0.3)
    objective = micro_objective(FullVocabScores(logits), packed, old, None, algo)
    (call,) = CALLS
    assert set(call) == {"logprobs", "old_logprobs", "advantages", "mask", "clip_low", "clip_high", "aggregation", "is_weights"}
    assert call["old_logprobs"] is old and call["advantages"] is packed.advantages
    assert (call["clip_low"], call["clip_high"], call["is_weights"]) == (0.1, 0.3, None)
    assert call["aggregation"].mode == "token_mean" and call["aggregation"].episode_share is packed.episode_share
    logprobs = token_logprobs(logits, packed.targets)
    assert torch.isclose(torch.tensor(objective.pg_loss), -(logprobs * packed.loss_mask).sum() / 3)
    assert objective.clip_frac == 0.25
    objective.loss.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
