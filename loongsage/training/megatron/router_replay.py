"""R3 in megatron-core's MoE routers: compared with, and with replay routed by, the experts the
engine chose (loongsage.training.routing_replay holds the pure pieces).

megatron-core routes through `router.router_replay.get_replay_topk(scores, topk, ...,
default_compute_topk)` when a router has one: its `RouterReplay` (moe_enable_routing_replay)
records or replays top-k indices set for all routers of the process at once. We give each router
of the policy an object of our own with that method instead, for two reasons: the replay data is
this micro-batch's and this model's (megatron's instances live in one process-wide list, which a
reference model's routers would join), and the router's own choice is computed too, which
train/routing_mismatch needs while the engine's is replayed. The scores are what megatron would
take the top-k of (logits, or probabilities with pre-softmax), so replayed experts are weighted
exactly as megatron weighs its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from loongsage.training.megatron.model import gpt_model
from loongsage.training.routing_replay import RoutingCount, layer_routes, replayed


class MegatronRouting:
    """Installed once on the policy model; inert outside `engine_routes`."""

    def __init__(self, model):
        layers = gpt_model(model).decoder.layers
        self.layers = [layer.layer_number - 1 for layer in layers if hasattr(layer.mlp, "router")]
        for layer in layers:
            if hasattr(layer.mlp, "router"):
                layer.mlp.router.router_replay = _LayerRoutes(self, layer.layer_number - 1)
        self.routes: Tensor | None = None
        self.replay = False
        self.count: RoutingCount | None = None
        self.counted: set[int] = set()

    @contextmanager
    def engine_routes(self, routed: Tensor | None, replay: bool, count: RoutingCount | None = None) -> Iterator[None]:
        """Within: one micro-batch's engine experts `routed` [B, T, layers * k] (None: none) are
        replayed when `replay`; each router's first call adds its mismatches to `count`. The
        routers see tokens in megatron's order, sequence-major ([T, B] flattened)."""
        self.routes = None if routed is None else routed.transpose(0, 1).reshape(-1, routed.shape[-1])
        self.replay, self.count, self.counted = replay, count, set()
        try:
            yield
        finally:
            self.routes, self.replay, self.count = None, False, None


class _LayerRoutes:
    def __init__(self, routing: MegatronRouting, layer: int):
        self.routing, self.layer = routing, layer

    def get_replay_topk(self, scores: Tensor, topk: int, num_groups=None, group_topk=None, default_compute_topk=None):
        values, experts = default_compute_topk(scores, topk, num_groups=num_groups, group_topk=group_topk)
        routing = self.routing
        if routing.routes is None:
            return values, experts
        engine = layer_routes(routing.routes, self.layer, topk).to(experts.device)
        if routing.count is not None and self.layer not in routing.counted:
            routing.counted.add(self.layer)
            with torch.no_grad():
                routing.count.add(experts, engine)
        if not routing.replay:
            return values, experts
        experts = replayed(experts, engine)
        return scores.gather(1, experts), experts
