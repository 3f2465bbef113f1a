from __future__ import annotations

import math

import pytest
import torch

from loongsage.algorithms.losses import (
    Aggregation,
    entropy_from_logits,
    kl_estimate,
    masked_aggregate,
    mismatch_k3_kl,
    token_logprobs,
)
from loongsage.algorithms.policy_losses import ppo_clip_loss

LN2 = 0.693147


def test_token_logprobs_hand_values():
    # row [0, 0, ln2] -> softmax [1/4, 1/4, 1/2]; uniform row of 3 -> 1/3 each
    logits = torch.tensor([[[0.0, 0.0, LN2], [1.0, 1.0, 1.0]]])
    targets = torch.tensor([[2, 0]])
    out = token_logprobs(logits, targets)
    # ln(1/2) = -0.693147, ln(1/3) = -1.098612
    torch.testing.assert_close(out, torch.tensor([[-0.693147, -1.098612]]), atol=1e-5, rtol=0)


def test_token_logprobs_bf16_input_gives_fp32_and_gradients():
    logits = torch.tensor([[[0.0, 0.0, LN2]], [[0.0, 0.0, 0.0]]], dtype=torch.bfloat16, requires_grad=True)
    out = token_logprobs(logits, torch.tensor([[0], [1]]))
    assert out.dtype == torch.float32
    # ln(1/4) = -1.386294 (bf16 ln2 rounds, hence the tolerance), ln(1/3) = -1.098612
    torch.testing.assert_close(out, torch.tensor([[-1.386294], [-1.098612]]), atol=2e-3, rtol=0)
    out.sum().backward()
    assert logits.grad is not None


def test_token_logprobs_shape_mismatch_is_clear():
    with pytest.raises(ValueError, match="targets"):
        token_logprobs(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


def test_entropy_hand_values_and_masked_vocab():
    logits = torch.tensor([[[0.0, 0.0, LN2], [0.0, 0.0, float("-inf")]]])
    ent = entropy_from_logits(logits)
    # [1/4, 1/4, 1/2]: 1.5 bits = 1.5 * ln2 = 1.039721 nats; [1/2, 1/2, 0]: ln2
    torch.testing.assert_close(ent, torch.tensor([[1.039721, 0.693147]]), atol=1e-5, rtol=0)


VALUES = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, float("nan"), float("inf")], [5.0, 5.0, 5.0, 5.0]])
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token_mean", 40.0 / 6.0),  # (1+2+3+4+10+20) / 6 tokens = 6.666667
        ("seq_mean_token_mean", 8.75),  # (2.5 + 15) / 2; the empty row does not count
        ("seq_mean_token_sum", 20.0),  # (10 + 30) / 2
    ],
)
def test_masked_aggregate_modes_differ_on_unequal_lengths(mode, expected):
    assert masked_aggregate(VALUES, MASK, mode).item() == pytest.approx(expected)


def test_masked_aggregate_empty_mask_is_zero_with_graph():
    values = torch.ones(2, 3, requires_grad=True)
    out = masked_aggregate(values, torch.zeros(2, 3), "seq_mean_token_mean")
    assert out.item() == 0.0
    out.backward()
    assert values.grad.abs().sum().item() == 0.0


def test_masked_aggregate_unknown_mode_lists_valid():
    with pytest.raises(ValueError, match="'seq_sum'.*token_mean, seq_mean_token_mean, seq_mean_token_sum"):
        masked_aggregate(VALUES, MASK, "seq_sum")


RATIOS = [1.25, 1.5, 0.7, 0.75]


def _ppo_inputs():
    logprobs = torch.log(torch.tensor([RATIOS, RATIOS])).requires_grad_(True)
    return logprobs, torch.zeros(2, 4), torch.tensor([1.0, -1.0]), torch.ones(2, 4)


def test_ppo_clip_loss_hand_values():
    logprobs, old, adv, mask = _ppo_inputs()
    loss, stats = ppo_clip_loss(logprobs, old, adv, mask)
    # clip range [0.8, 1.28]; per token max(-A r, -A clip(r))
    # A=+1: r=1.25 -> -1.25 | 1.5 -> -1.28 (clipped) | 0.7 -> -0.7 | 0.75 -> -0.75   sum -3.98
    # A=-1: r=1.25 ->  1.25 | 1.5 ->  1.5           | 0.7 -> 0.8 (clipped) | 0.75 -> 0.8 (clipped) sum 4.35
    # token mean (4.35 - 3.98) / 8 = 0.04625
    assert loss.item() == pytest.approx(0.04625, abs=1e-6)
    assert stats["clip_frac"] == pytest.approx(3 / 8)
    assert stats["ratio_mean"] == pytest.approx(1.05)  # 2 * (1.25+1.5+0.7+0.75) / 8


def test_gradient_flows_only_through_unclipped_branch():
    logprobs, old, adv, mask = _ppo_inputs()
    loss, _ = ppo_clip_loss(logprobs, old, adv, mask)
    loss.backward()
    # d(-A r)/d logp = -A r, divided by 8 tokens; clipped tokens get 0
    expected = torch.tensor(
        [
            [-0.15625, 0.0, -0.0875, -0.09375],
            [0.15625, 0.1875, 0.0, 0.0],
        ]
    )
    torch.testing.assert_close(logprobs.grad, expected, atol=1e-6, rtol=0)


def test_clip_higher_is_asymmetric():
    logprobs = torch.log(torch.tensor([[1.25], [0.75]]))
    old, mask = torch.zeros(2, 1), torch.ones(2, 1)
    # A=+1 at r=1.25 lies inside [0.8, 1.28]: loss -1.25; with symmetric 0.2 it clips to -1.2
    up, _ = ppo_clip_loss(logprobs[:1], old[:1], torch.tensor([1.0]), mask[:1])
    up_sym, _ = ppo_clip_loss(logprobs[:1], old[:1], torch.tensor([1.0]), mask[:1], clip_high=0.2)
    assert up.item() == pytest.approx(-1.25)
    assert up_sym.item() == pytest.approx(-1.2)
    # A=-1 at r=0.75 is below 1 - clip_low = 0.8: clipped to 0.8 either way
    down, stats = ppo_clip_loss(logprobs[1:], old[1:], torch.tensor([-1.0]), mask[1:])
    assert down.item() == pytest.approx(0.8)
    assert stats["clip_frac"] == 1.0


def test_ppo_masking_and_per_token_advantages():
    logprobs, old, _, _ = _ppo_inputs()
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 0]])
    loss, stats = ppo_clip_loss(logprobs, old, adv, mask, aggregation=Aggregation("seq_mean_token_sum"))
    # row 1 keeps -1.25, -1.28 -> sum -2.53; row 2 keeps 0.8 -> mean over rows (-2.53 + 0.8) / 2
    assert loss.item() == pytest.approx(-0.865, abs=1e-6)
    assert stats["clip_frac"] == pytest.approx(2 / 3)  # 1.5 (row 1) and 0.7 (row 2) of 3 tokens


def test_old_logprobs_get_no_gradient():
    logprobs, _, adv, mask = _ppo_inputs()
    old = torch.zeros(2, 4, requires_grad=True)
    loss, _ = ppo_clip_loss(logprobs, old, adv, mask)
    loss.backward()
    assert old.grad is None


def test_kl_estimators_hand_values():
    logp = torch.tensor([[math.log(0.5), -1.0]])
    ref = torch.tensor([[math.log(0.25), -1.0]])
    # logp - ref = ln2 = 0.693147 on token 1, 0 on token 2
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), torch.tensor([[0.693147, 0.0]]), atol=1e-6, rtol=0)
    # 0.5 * 0.693147^2 = 0.240227
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), torch.tensor([[0.240227, 0.0]]), atol=1e-6, rtol=0)
    # exp(-ln2) + ln2 - 1 = 0.5 + 0.693147 - 1 = 0.193147
    torch.testing.assert_close(kl_estimate(logp, ref), torch.tensor([[0.193147, 0.0]]), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="'k4'.*k1, k2, k3"):
        kl_estimate(logp, ref, "k4")


def test_mismatch_k3_kl_hand_value():
    rollout = torch.tensor([[-1.0, -2.0, -3.0]])
    train = torch.tensor([[-1.0 + math.log(2), -2.0 - math.log(2), 50.0]])
    mask = torch.tensor([[1, 1, 0]])
    # r = ln2: 2 - 1 - 0.693147 = 0.306853; r = -ln2: 0.5 - 1 + 0.693147 = 0.193147;
    # third token masked (its huge r must not leak) -> mean 0.5 / 2 = 0.25
    assert mismatch_k3_kl(train, rollout, mask).item() == pytest.approx(0.25, abs=1e-6)


def test_token_logprobs_gradient_is_onehot_minus_softmax():
    # d log p_k / d logit_j = [j == k] - p_j; softmax of [0, 0, ln2] is [1/4, 1/4, 1/2]
    logits = torch.tensor([[[0.0, 0.0, LN2]]], requires_grad=True)
    token_logprobs(logits, torch.tensor([[2]])).sum().backward()
    torch.testing.assert_close(logits.grad, torch.tensor([[[-0.25, -0.25, 0.5]]]), atol=1e-6, rtol=0)


def test_seq_mean_token_sum_norm_divides_each_sum_by_a_constant_length():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # sums 3 and 4 over the constant 10 (not their lengths 2 and 1), mean over the 2 sequences
    assert masked_aggregate(values, mask, "seq_mean_token_sum_norm", norm_length=10).item() == pytest.approx(0.35)
    # an episode split into two branches (shares 2/3, 1/3) counts once: (3 + 4) / 10 / 1
    share = torch.tensor([2 / 3, 1 / 3])
    assert Aggregation("seq_mean_token_sum_norm", share, 10)(values, mask).item() == pytest.approx(0.7)
    with pytest.raises(ValueError, match="norm_length must be > 0"):
        masked_aggregate(values, mask, "seq_mean_token_sum_norm")
