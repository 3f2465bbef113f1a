from __future__ import annotations

import math

import pytest
import torch

from loongsage.algorithms import (
    IS_LEVELS,
    IS_MODES,
    importance_weights,
    informative_groups,
    interpolated_proximal_logprobs,
    masked_aggregate,
    ppo_clip_loss,
)

LN2 = math.log(2.0)

# Token log-ratios ln2, ln0.5, 0, ln0.25 -> weights 2, 0.5, 1, 0.25; the last column is
# padding holding a huge log-ratio that must not leak into anything.
TOKEN_PROX = torch.tensor([[LN2, -LN2, 0.0, 100.0], [math.log(0.25), 0.0, 0.0, 0.0]])
TOKEN_BEHAV = torch.zeros(2, 4)
TOKEN_MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])


def test_token_weights_truncate():
    weights, stats = importance_weights(TOKEN_PROX, TOKEN_BEHAV, TOKEN_MASK, "token", "truncate", high=1.5)
    # masked weights 2, 0.5, 1 | 0.25; 2 truncated to 1.5
    torch.testing.assert_close(weights[TOKEN_MASK.bool()], torch.tensor([1.5, 0.5, 1.0, 0.25]))
    assert stats["is_weight_mean"] == pytest.approx(0.9375)  # (2 + 0.5 + 1 + 0.25) / 4, before truncation
    assert stats["is_weight_max"] == pytest.approx(2.0)
    assert stats["is_weight_min"] == pytest.approx(0.25)
    assert stats["is_clip_frac"] == pytest.approx(1 / 4)
    assert stats["is_mask_frac"] == 0.0


def test_token_weights_mask_outside_bounds_inclusive():
    weights, stats = importance_weights(TOKEN_PROX, TOKEN_BEHAV, TOKEN_MASK, "token", "mask", low=0.5, high=1.5)
    # 2 > 1.5 and 0.25 < 0.5 are masked out; 0.5 sits on the bound and stays
    torch.testing.assert_close(weights[TOKEN_MASK.bool()], torch.tensor([0.0, 0.5, 1.0, 0.0]))
    assert stats["is_mask_frac"] == pytest.approx(2 / 4)
    assert stats["is_clip_frac"] == 0.0
    assert stats["is_weight_mean"] == pytest.approx(0.9375)


# 2 x 3: row 0 log-ratios ln2, ln2, ln0.5 (all trained); row 1 ln2, ln2 and a padded column.
SEQ_PROX = torch.tensor([[LN2, LN2, -LN2], [LN2, LN2, 100.0]])
SEQ_BEHAV = torch.zeros(2, 3)
SEQ_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_sequence_level_is_exp_of_the_summed_log_ratio():
    weights, stats = importance_weights(SEQ_PROX, SEQ_BEHAV, SEQ_MASK, "sequence", "truncate", high=10.0)
    # row 0: exp(ln2 + ln2 - ln2) = 2; row 1: exp(2 ln2) = 4, broadcast over the row
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.0, 2.0], [4.0, 4.0, 4.0]]))
    assert stats["is_weight_mean"] == pytest.approx(2.8)  # (3 * 2 + 2 * 4) / 5 masked tokens
    assert (stats["is_weight_max"], stats["is_weight_min"]) == pytest.approx((4.0, 2.0))


def test_geometric_level_is_exp_of_the_mean_log_ratio():
    weights, stats = importance_weights(SEQ_PROX, SEQ_BEHAV, SEQ_MASK, "geometric", "truncate", high=10.0)
    # row 0: exp(ln2 / 3) = 2^(1/3) = 1.259921; row 1: exp(2 ln2 / 2) = 2
    torch.testing.assert_close(weights, torch.tensor([[1.259921] * 3, [2.0] * 3]), atol=1e-6, rtol=0)
    assert stats["is_weight_mean"] == pytest.approx((3 * 1.259921 + 2 * 2.0) / 5, abs=1e-6)  # 1.555953


def test_sequence_level_truncates_and_masks_whole_sequences():
    weights, stats = importance_weights(SEQ_PROX, SEQ_BEHAV, SEQ_MASK, "sequence", "truncate", high=3.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0] * 3, [3.0] * 3]))
    assert stats["is_clip_frac"] == pytest.approx(2 / 5)  # the 2 trained tokens of row 1
    weights, stats = importance_weights(SEQ_PROX, SEQ_BEHAV, SEQ_MASK, "sequence", "mask", low=0.5, high=3.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0] * 3, [0.0] * 3]))
    assert stats["is_mask_frac"] == pytest.approx(2 / 5)


def test_sequence_without_trained_tokens_and_empty_mask():
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    weights, stats = importance_weights(SEQ_PROX, SEQ_BEHAV, mask, "geometric", "mask", low=0.5, high=3.0)
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(weights[1], torch.ones(3))  # exp(0 / max(0, 1)): an unused weight of 1
    assert stats["is_weight_mean"] == pytest.approx(1.259921, abs=1e-6)
    _, empty = importance_weights(SEQ_PROX, SEQ_BEHAV, torch.zeros(2, 3), "token")
    assert empty == dict.fromkeys(empty, 0.0) and len(empty) == 5


def test_huge_log_ratios_do_not_overflow_and_weights_are_detached():
    prox = torch.full((1, 3), 500.0, requires_grad=True)
    weights, stats = importance_weights(prox, torch.zeros(1, 3), torch.ones(1, 3), "sequence", "truncate", high=2.0)
    assert not weights.requires_grad
    torch.testing.assert_close(weights, torch.full((1, 3), 2.0))
    assert stats["is_weight_max"] == pytest.approx(math.exp(20.0), rel=1e-5)  # log-ratio clamped at 20
    assert stats["is_clip_frac"] == 1.0


def test_bf16_inputs_give_float32_weights():
    weights, _ = importance_weights(TOKEN_PROX.bfloat16(), TOKEN_BEHAV.bfloat16(), TOKEN_MASK, "token")
    assert weights.dtype == torch.float32


def test_level_none_is_all_ones():
    weights, stats = importance_weights(TOKEN_PROX, TOKEN_BEHAV, TOKEN_MASK, "none")
    torch.testing.assert_close(weights, torch.ones(2, 4))
    assert stats["is_weight_mean"] == 1.0


def test_bad_names_list_the_valid_ones():
    assert IS_LEVELS == ("none", "token", "sequence", "geometric") and IS_MODES == ("truncate", "mask")
    with pytest.raises(ValueError, match="'tokens'.*none, token, sequence, geometric"):
        importance_weights(TOKEN_PROX, TOKEN_BEHAV, TOKEN_MASK, "tokens")
    with pytest.raises(ValueError, match="'clip'.*truncate, mask"):
        importance_weights(TOKEN_PROX, TOKEN_BEHAV, TOKEN_MASK, "token", "clip")


def test_interpolation_alpha_zero_half_one():
    behaviour = torch.tensor([[-2.0, -2.0, -2.0, -2.0]])
    current = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    versions = torch.tensor([[3, 2, 4, 5]])
    out = interpolated_proximal_logprobs(behaviour, current, versions, proximal_version=3, current_version=4)
    # v=3: alpha (3-3)/(4-3) = 0 -> -2 | v=2: (3-2)/(4-2) = 0.5 -> -1.5
    # v=4 == current: the current logprob -1 | v=5: (3-5)/(4-5) = 2, clamped to 1 -> -1
    torch.testing.assert_close(out, torch.tensor([[-2.0, -1.5, -1.0, -1.0]]))


def test_interpolation_at_the_first_mini_batch_is_the_current_policy():
    behaviour, current = torch.tensor([[-2.0, -2.0]]), torch.tensor([[-1.0, -1.0]])
    # proximal == current version: alpha = (3-1)/(3-1) = 1, and v=3 == current -> 1
    out = interpolated_proximal_logprobs(behaviour, current, torch.tensor([[1, 3]]), 3, 3)
    torch.testing.assert_close(out, current)


def test_interpolation_with_fractional_current_version():
    behaviour, current = torch.tensor([[-2.0, -2.0]]), torch.tensor([[-1.0, -1.0]], requires_grad=True)
    out = interpolated_proximal_logprobs(behaviour, current, torch.tensor([[3, 2]]), 3, 3.5)
    # v=3: alpha 0 -> -2 | v=2: (3-2)/(3.5-2) = 2/3 -> -2 + 2/3 = -1.333333
    torch.testing.assert_close(out, torch.tensor([[-2.0, -1.333333]]), atol=1e-6, rtol=0)
    assert not out.requires_grad


RATIOS = [1.25, 1.5, 0.7, 0.75]


def _ppo_inputs():
    logprobs = torch.log(torch.tensor([RATIOS, RATIOS])).requires_grad_(True)
    return logprobs, torch.zeros(2, 4), torch.tensor([1.0, -1.0]), torch.ones(2, 4)


def test_ppo_clip_loss_with_is_weights_hand_values():
    logprobs, old, adv, mask = _ppo_inputs()
    is_weights = torch.tensor([[2.0, 0.5, 1.0, 0.0], [1.0, 1.0, 0.5, 2.0]], requires_grad=True)
    loss, stats = ppo_clip_loss(logprobs, old, adv, mask, is_weights=is_weights)
    # surrogates (clip range [0.8, 1.28]) times weights:
    # A=+1: -1.25*2, -1.28*0.5, -0.7*1, -0.75*0 = -2.5, -0.64, -0.7, 0   sum -3.84
    # A=-1:  1.25*1,  1.5*1,     0.8*0.5, 0.8*2 = 1.25, 1.5, 0.4, 1.6   sum  4.75
    # token mean (4.75 - 3.84) / 8 = 0.11375
    assert loss.item() == pytest.approx(0.11375, abs=1e-6)
    assert stats["clip_frac"] == pytest.approx(3 / 8)  # the ratio's clipping, not the weights'
    loss.backward()
    # -A r w / 8 on unclipped tokens: -1.25*2/8, clipped, -0.7/8, w=0 | 1.25/8, 1.5/8, clipped, clipped
    expected = torch.tensor([[-0.3125, 0.0, -0.0875, 0.0], [0.15625, 0.1875, 0.0, 0.0]])
    torch.testing.assert_close(logprobs.grad, expected, atol=1e-6, rtol=0)
    assert is_weights.grad is None


def test_ppo_clip_loss_without_is_weights_is_unchanged():
    logprobs, old, adv, mask = _ppo_inputs()
    loss, _ = ppo_clip_loss(logprobs, old, adv, mask, is_weights=None)
    ratio = torch.exp(logprobs - old)
    before = masked_aggregate(torch.maximum(-adv[:, None] * ratio, -adv[:, None] * ratio.clamp(0.8, 1.28)), mask, "token_mean")
    assert torch.equal(loss, before)
    assert loss.item() == pytest.approx(0.04625, abs=1e-6)
    ones, _ = ppo_clip_loss(logprobs, old, adv, mask, is_weights=torch.ones(2, 4))
    assert torch.equal(ones, loss)


def test_informative_groups():
    # group 0: 1, 1 (equal) | group 1: 0, 1 | group 2: one sample | group 3: 2, 2, 3; groups interleaved
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.5, 2.0, 2.0, 3.0])
    group_ids = torch.tensor([0, 1, 0, 1, 2, 3, 3, 3])
    assert informative_groups(rewards, group_ids).tolist() == [False, True, False, True, False, True, True, True]
    with pytest.raises(ValueError, match="same 1-D shape"):
        informative_groups(rewards, group_ids[:3])
