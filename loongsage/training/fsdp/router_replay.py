"""R3 in a transformers MoE model: its routers (Qwen2-MoE's and Qwen3-MoE's softmax top-k
`mlp.gate`) compared with, and with replay routed by, the experts the engine chose
(loongsage.training.routing_replay holds the pure pieces)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from loongsage.training.routing_replay import RoutingCount, layer_routes, replayed, topk_weights

# Routers whose forward is softmax over the experts, top-k, renormalized if norm_topk_prob: the
# ones this replay computes exactly as transformers does.
SOFTMAX_TOPK_ROUTERS = ("Qwen2MoeTopKRouter", "Qwen3MoeTopKRouter")


class HfRouting:
    """Installed once on the model (before it is wrapped); inert outside `engine_routes`."""

    def __init__(self, model: nn.Module):
        layers = model.model.layers
        self.routers = [(index, layer.mlp.gate) for index, layer in enumerate(layers) if hasattr(layer.mlp, "experts")]
        for _, router in self.routers:
            if type(router).__name__ not in SOFTMAX_TOPK_ROUTERS:
                raise ValueError(
                    f"the fsdp backend compares and replays (algorithm.routing_replay) the routing of "
                    f"{', '.join(SOFTMAX_TOPK_ROUTERS)} only, not {type(router).__name__}"
                )
        for index, router in self.routers:
            router.forward = partial(self._route, index, router)
        self.routes: Tensor | None = None
        self.replay = False
        self.count: RoutingCount | None = None
        self._counted: set[int] = set()

    @contextmanager
    def engine_routes(self, routed: Tensor | None, replay: bool, count: RoutingCount | None = None) -> Iterator[None]:
        """Within: the engine's experts `routed` [B, T, layers * k] (None: none) are replayed when
        `replay`, and each router's first call adds its mismatches to `count` (gradient
        checkpointing calls it again in the backward pass)."""
        self.routes = None if routed is None else routed.reshape(-1, routed.shape[-1])
        self.replay, self.count, self._counted = replay, count, set()
        try:
            yield
        finally:
            self.routes, self.replay, self.count = None, False, None

    def _route(self, index: int, router: nn.Module, hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        hidden = hidden_states.reshape(-1, router.hidden_dim)
        logits = F.linear(hidden, router.weight)
        probs = F.softmax(logits, dtype=torch.float, dim=-1)
        experts = torch.topk(probs, router.top_k, dim=-1).indices
        if self.routes is not None:
            engine = layer_routes(self.routes, index, router.top_k)
            if self.count is not None and index not in self._counted:
                self._counted.add(index)
                self.count.add(experts, engine)
            if self.replay:
                experts = replayed(experts, engine)
        weights = topk_weights(probs, experts, router.norm_topk_prob)
        return logits, weights.to(logits.dtype), experts
