"""R3 in a transformers MoE model: its routers (Qwen2-MoE's and Qwen3-MoE's softmax top-k
`mlp.gate`) compared with, and with replay routed by, the experts the engine chose
(loongsage.training.routing_replay holds the pure pieces)."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loongsage.training.routing_replay import EngineRoutes, topk_weights

# Routers whose forward is softmax over the experts, top-k, renormalized if norm_topk_prob: the
# ones this replay computes exactly as transformers does.
SOFTMAX_TOPK_ROUTERS = ("Qwen2MoeTopKRouter", "Qwen3MoeTopKRouter")


class HfRouting(EngineRoutes):
    """Installed once on the model (before it is wrapped)."""

    def __init__(self, model: nn.Module):
        super().__init__(sequence_major=False)
        routers = [(index, layer.mlp.gate) for index, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "experts")]
        for _, router in routers:
            if type(router).__name__ not in SOFTMAX_TOPK_ROUTERS:
                raise ValueError(
                    f"the fsdp backend compares and replays (algorithm.routing_replay) the routing of "
                    f"{', '.join(SOFTMAX_TOPK_ROUTERS)} only, not {type(router).__name__}"
                )
        for index, router in routers:
            router.forward = partial(self._route, index, router)

    def _route(self, index: int, router: nn.Module, hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        hidden = hidden_states.reshape(-1, router.hidden_dim)
        logits = F.linear(hidden, router.weight)
        probs = F.softmax(logits, dtype=torch.float, dim=-1)
        experts = self.route(index, torch.topk(probs, router.top_k, dim=-1).indices)
        weights = topk_weights(probs, experts, router.norm_topk_prob)
        return logits, weights.to(logits.dtype), experts
