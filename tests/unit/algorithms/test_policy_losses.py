"""GSPO and CISPO against hand-computed values (PPO-clip's are in test_losses.py)."""

from __future__ import annotations

import math

import pytest
import torch

from loongsage.algorithms.losses import Aggregation
from loongsage.algorithms.policy_losses import POLICY_LOSSES, cispo_loss, gspo_loss, ppo_clip_loss

SEQ_MEAN = Aggregation("seq_mean_token_mean")


def _gspo_inputs(row1_log_ratio: float):
    # Row 0 trains 2 tokens with log-ratios ln2 and 0 (mean ln2 / 2: ratio sqrt 2); its third
    # position is padding with a huge log-ratio that must not leak. Row 1: three equal log-ratios.
    logprobs = torch.tensor([[math.log(2.0), 0.0, 100.0], [row1_log_ratio] * 3], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    return logprobs, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), mask


def test_gspo_one_ratio_per_sequence_hand_values():
    logprobs, old, advantages, mask = _gspo_inputs(math.log(0.8))
    loss, metrics = gspo_loss(logprobs, old, advantages, mask, clip_low=0.5, clip_high=0.5, aggregation=SEQ_MEAN)
    # s0 = exp(ln2 / 2) = 1.414214, inside [0.5, 1.5]: each token -1 * 1.414214; s1 = 0.8: +0.8.
    # seq_mean_token_mean: (-1.414214 + 0.8) / 2
    assert loss.item() == pytest.approx(-0.307107, abs=1e-6)
    assert metrics["clip_frac"] == 0.0
    loss.backward()
    # Every token's gradient is its sequence's ratio times its own score: row 0 -s0 / 2 tokens / 2
    # sequences, row 1 +0.8 / 3 / 2; padding none.
    expected = torch.tensor([[-0.353553, -0.353553, 0.0], [0.133333, 0.133333, 0.133333]])
    torch.testing.assert_close(logprobs.grad, expected, atol=1e-6, rtol=0)


def test_gspo_clips_whole_sequences_with_its_own_epsilons():
    logprobs, old, advantages, mask = _gspo_inputs(1e-4)
    loss, metrics = gspo_loss(logprobs, old, advantages, mask, aggregation=SEQ_MEAN)  # 3e-4 / 4e-4
    # s0 = 1.414 > 1 + 4e-4 with A > 0: clipped, row 0 gets no gradient at all; s1 = exp(1e-4) is inside.
    assert loss.item() == pytest.approx((-1.0004 + math.exp(1e-4)) / 2, abs=1e-6)
    assert metrics["clip_frac"] == pytest.approx(2 / 5)
    loss.backward()
    assert logprobs.grad[0].abs().sum() == 0
    torch.testing.assert_close(logprobs.grad[1], torch.full((3,), math.exp(1e-4) / 6), atol=1e-6, rtol=0)


def test_gspo_of_one_token_is_ppo_clip():
    logprobs = torch.tensor([[math.log(1.1)], [math.log(0.7)]])
    args = (logprobs, torch.zeros(2, 1), torch.tensor([1.0, -1.0]), torch.ones(2, 1))
    gspo, gspo_metrics = gspo_loss(*args, clip_low=0.2, clip_high=0.28)
    ppo, ppo_metrics = ppo_clip_loss(*args, clip_low=0.2, clip_high=0.28, aggregation=SEQ_MEAN)
    assert gspo.item() == pytest.approx(ppo.item())
    assert gspo_metrics == pytest.approx(ppo_metrics)


def test_gspo_long_sequence_log_ratio_is_clamped_not_overflowing():
    logprobs = torch.full((1, 4096), 30.0, requires_grad=True)
    loss, metrics = gspo_loss(logprobs, torch.zeros(1, 4096), torch.tensor([-1.0]), torch.ones(1, 4096))
    # A < 0 takes the unclipped exp(10), not exp(30) (inf in float32 after many tokens would be NaN)
    assert loss.item() == pytest.approx(math.exp(10.0), rel=1e-5)
    loss.backward()
    assert torch.isfinite(logprobs.grad).all()
    assert metrics["ratio_mean"] == pytest.approx(math.exp(10.0), rel=1e-5)


def test_cispo_hand_values_and_clipped_tokens_keep_gradient():
    logprobs = torch.tensor([[math.log(1.5), math.log(0.5), 0.0]], requires_grad=True)
    loss, metrics = cispo_loss(logprobs, torch.zeros(1, 3), torch.tensor([2.0]), torch.ones(1, 3), clip_low=1.0, clip_high=0.28)
    # weights sg(clip(r, 0, 1.28)) = 1.28, 0.5, 1.0; terms -A w logp = -1.037990, 0.693147, 0; token mean
    assert loss.item() == pytest.approx((-2 * 1.28 * math.log(1.5) + 2 * 0.5 * math.log(2.0)) / 3, abs=1e-6)
    assert metrics["clip_frac"] == pytest.approx(1 / 3)
    loss.backward()
    # -A w / 3: the clipped token still learns (at its bound), where PPO-clip gives it 0
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-2 * 1.28 / 3, -2 * 0.5 / 3, -2 / 3]]), atol=1e-6, rtol=0)


def test_cispo_is_weights_and_mask():
    logprobs = torch.tensor([[math.log(1.2), 0.0]], requires_grad=True)
    loss, _ = cispo_loss(
        logprobs,
        torch.zeros(1, 2),
        torch.tensor([[1.0, 5.0]]),
        torch.tensor([[1, 0]]),
        is_weights=torch.tensor([[0.5, 9.0]]),
    )
    # only token 0: -1 * 1.2 * 0.5 * ln 1.2
    assert loss.item() == pytest.approx(-0.6 * math.log(1.2), abs=1e-6)


def test_the_registry_names_every_loss_and_refuses_others():
    assert {"ppo_clip", "gspo", "cispo"} <= set(POLICY_LOSSES)
    with pytest.raises(ValueError, match="ppo_clip") as refused:
        POLICY_LOSSES.get("gpso")
    assert "gspo" in str(refused.value) and "cispo" in str(refused.value)
