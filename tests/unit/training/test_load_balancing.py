"""The routers' load-balancing loss computed by the fsdp backend is megatron-core's."""

from __future__ import annotations

import pytest
import torch

from loongsage.training.load_balancing import switch_load_balancing_loss


def test_a_router_that_favours_two_of_four_experts_by_hand():
    # Every token puts probability (0.4, 0.4, 0.1, 0.1) on the experts and picks the first two:
    # f = (1/2, 1/2, 0, 0), P = (0.4, 0.4, 0.1, 0.1), E * sum f_i P_i = 4 * 0.4 = 1.6.
    logits = torch.tensor([[0.4, 0.4, 0.1, 0.1]]).log().expand(6, 4)
    loss = switch_load_balancing_loss(logits, torch.ones(6, dtype=torch.bool), top_k=2)
    assert loss.item() == pytest.approx(1.6)


def test_padding_counts_for_nothing():
    logits = torch.randn(10, 4, generator=torch.Generator().manual_seed(0))
    real = torch.tensor([1] * 7 + [0] * 3)
    padded = logits.clone()
    padded[7:] = torch.tensor([50.0, -50.0, -50.0, -50.0])  # would pull everything to expert 0
    assert switch_load_balancing_loss(padded, real, 2).item() == pytest.approx(
        switch_load_balancing_loss(logits[:7], torch.ones(7), 2).item()
    )


def test_equals_megatron_cores_loss_and_gradient():
    from megatron.core.transformer.moe.moe_utils import compute_routing_scores_for_aux_loss, switch_load_balancing_loss_func

    logits = torch.randn(12, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
    padding = torch.tensor([False] * 9 + [True] * 3)  # megatron's mask: True = padding
    routing_map, scores = compute_routing_scores_for_aux_loss(logits, 3, "softmax", padding_mask=padding)
    theirs = switch_load_balancing_loss_func(scores, routing_map.sum(dim=0), 9, 3, 8, moe_aux_loss_coeff=1.0)
    (their_grad,) = torch.autograd.grad(theirs, logits)
    ours = switch_load_balancing_loss(logits, ~padding, 3)
    (our_grad,) = torch.autograd.grad(ours, logits)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    torch.testing.assert_close(our_grad, their_grad)
