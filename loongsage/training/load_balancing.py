"""The routers' load-balancing loss, as megatron-core adds it, for a trainer that computes it itself.

Switch Transformer's auxiliary loss (Fedus et al. 2021, eq. 4), per MoE layer and micro-batch,
in megatron-core's form (`moe_router_load_balancing_type="aux_loss"`,
switch_load_balancing_loss_func): E * sum_i f_i * P_i over the micro-batch's T real tokens, f_i
the fraction of their top-k choices that went to expert i (the router's own choice, also under
routing replay), P_i expert i's mean softmax probability. The counts carry no gradient; the
probabilities do. megatron sums it over layers and, in a step of M micro-batches, weighs each
micro-batch by 1/M, times trainer.moe.aux_loss_coeff (or the checkpoint's router_aux_loss_coef).
"""

from __future__ import annotations

import torch
from torch import Tensor


def switch_load_balancing_loss(router_logits: Tensor, real: Tensor, top_k: int) -> Tensor:
    """One router over one micro-batch: `router_logits` [N, E], `real` [N] (False = padding)."""
    real = real.reshape(-1, 1).to(torch.float32)
    probs = router_logits.float().softmax(dim=-1) * real
    chosen = torch.zeros_like(probs).scatter(1, probs.topk(top_k, dim=-1).indices, 1.0) * real
    tokens = real.sum().clamp(min=1.0)
    num_experts = router_logits.shape[-1]
    return num_experts * (probs.sum(dim=0) * chosen.sum(dim=0)).sum() / (top_k * tokens * tokens)


def layers_load_balancing_loss(router_logits: tuple[Tensor, ...], real: Tensor, top_k: int) -> Tensor:
    """The sum over a model's MoE layers (megatron attaches each layer's to its own output)."""
    return sum(switch_load_balancing_loss(logits, real, top_k) for logits in router_logits)
