"""Routing replay (R3) and routing mismatch, as pure tensor functions both backends use.

The engines return, per token and MoE layer, the top-k experts they routed it to (Sample.routed_experts,
packed as PackedBatch.routed_experts [B, T, layers * k], -1 where a position has none: padding, the
last token, a dense layer). The trainer compares its own choice with it (`train/routing_mismatch`:
the fraction of token x layer top-k sets that differ) and, with algorithm.routing_replay, routes each
token to the engine's experts instead, weighted by its own router's probabilities of them, so that
the gradient still reaches the router.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from loongsage.sample import Sample


def layer_routes(routed: Tensor, layer: int, top_k: int) -> Tensor:
    """[..., layers * k] -> the engine's experts of decoder layer `layer`, [..., k] (long)."""
    return routed[..., layer * top_k : (layer + 1) * top_k].long()


def known(engine: Tensor) -> Tensor:
    """Rows [N, k] the engine routed (a row of -1 it did not)."""
    return (engine >= 0).all(dim=-1)


def mismatched(own: Tensor, engine: Tensor) -> tuple[int, int]:
    """(rows whose top-k sets differ, rows compared) over the rows the engine routed; own/engine [N, k]."""
    rows = known(engine)
    same = (own[rows].sort(dim=-1).values == engine[rows].sort(dim=-1).values).all(dim=-1)
    return int((~same).sum()), int(rows.sum())


def replayed(own: Tensor, engine: Tensor) -> Tensor:
    """The experts to route to: the engine's where it routed the token, the trainer's own elsewhere."""
    return torch.where(known(engine)[:, None], engine, own)


def topk_weights(probs: Tensor, experts: Tensor, normalize: bool) -> Tensor:
    """The router's probabilities [N, E] of the chosen experts [N, k], renormalized to sum to 1 when
    the model does (norm_topk_prob)."""
    weights = probs.gather(-1, experts)
    return weights / weights.sum(dim=-1, keepdim=True) if normalize else weights


def check_routes(samples: list[Sample], replay: bool) -> None:
    """With replay, every sample must carry the engine's routing: a sample without it would be
    trained on the trainer's own routing, which replay is there to avoid."""
    if not replay:
        return
    missing = next((i for i, sample in enumerate(samples) if sample.routed_experts is None), None)
    if missing is not None:
        raise ValueError(
            f"algorithm.routing_replay=true but sample {missing} carries no routed_experts: the engines did not return "
            f"them (SGLang needs --enable-return-routed-experts and return_routed_experts, SGLang >= 0.5.14)"
        )


@dataclass
class RoutingCount:
    """Mismatched and compared token x layer rows, summed over a step's forwards."""

    mismatched: int = 0
    compared: int = 0

    def add(self, own: Tensor, engine: Tensor) -> None:
        differ, rows = mismatched(own, engine)
        self.mismatched += differ
        self.compared += rows


class EngineRoutes:
    """One micro-batch's engine routes where a model's routers read them; inert outside
    `engine_routes`. `sequence_major`: the routers see tokens as [T, B] flattened (megatron), else
    [B, T] (transformers)."""

    def __init__(self, sequence_major: bool):
        self.sequence_major = sequence_major
        self.routes: Tensor | None = None
        self.replay = False
        self.count: RoutingCount | None = None
        self.counted: set[int] = set()

    @contextmanager
    def engine_routes(self, routed: Tensor | None, replay: bool, count: RoutingCount | None = None) -> Iterator[None]:
        """Within: the engine's experts `routed` [B, T, layers * k] (None: none) are replayed when
        `replay`, and each layer's first call adds its mismatches to `count` (a recompute in the
        backward pass calls it again)."""
        if routed is not None and self.sequence_major:
            routed = routed.transpose(0, 1)
        self.routes = None if routed is None else routed.reshape(-1, routed.shape[-1])
        self.replay, self.count, self.counted = replay, count, set()
        try:
            yield
        finally:
            self.routes, self.replay, self.count = None, False, None

    def route(self, layer: int, own: Tensor) -> Tensor:
        """The experts [N, k] decoder layer `layer` routes to, given its own choice `own`."""
        if self.routes is None:
            return own
        engine = layer_routes(self.routes, layer, own.shape[-1]).to(own.device)
        if self.count is not None and layer not in self.counted:
            self.counted.add(layer)
            with torch.no_grad():
                self.count.add(own, engine)
        return replayed(own, engine) if self.replay else own
