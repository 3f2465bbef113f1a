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

from torch import Tensor

from loongsage.training.megatron.model import gpt_model
from loongsage.training.routing_replay import EngineRoutes, RoutingCount


class MegatronRouting(EngineRoutes):
    """Installed once on the policy model; megatron's routers see tokens sequence-major and,
    under sequence parallelism, only this tensor-parallel rank's slice of the sequence."""

    def __init__(self, model):
        from megatron.core import parallel_state as ps

        super().__init__(sequence_major=True)
        gpt = gpt_model(model)
        sliced = gpt.config.sequence_parallel
        self.slices = ps.get_tensor_model_parallel_world_size() if sliced else 1
        self.slice = ps.get_tensor_model_parallel_rank() if sliced else 0
        for layer in gpt.decoder.layers:
            if hasattr(layer.mlp, "router"):
                layer.mlp.router.router_replay = _LayerRoutes(self, layer.layer_number - 1)

    def engine_routes(self, routed: Tensor | None, replay: bool, count: RoutingCount | None = None):
        if routed is not None and self.slices > 1:
            routed = routed.chunk(self.slices, dim=1)[self.slice]  # [B, T / tp, layers * k]
        return super().engine_routes(routed, replay, count)


class _LayerRoutes:
    """What megatron-core's router calls for its top-k (RouterReplay's method)."""

    def __init__(self, routing: MegatronRouting, layer: int):
        self.routing, self.layer = routing, layer

    def get_replay_topk(self, scores: Tensor, topk: int, num_groups=None, group_topk=None, default_compute_topk=None):
        values, own = default_compute_topk(scores, topk, num_groups=num_groups, group_topk=group_topk)
        experts = self.routing.route(self.layer, own)
        if experts is own:
            return values, own
        return scores.gather(1, experts), experts
