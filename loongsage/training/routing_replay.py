"""Routing replay (R3) and routing mismatch, as pure tensor functions both backends use.

The engines return, per token and MoE layer, the top-k experts they routed it to (Sample.routed_experts,
packed as PackedBatch.routed_experts [B, T, layers * k], -1 where a position has none: padding, the
last token, a dense layer). The trainer compares its own choice with it (`train/routing_mismatch`:
the fraction of token x layer top-k sets that differ) and, with algorithm.routing_replay, routes each
token to the engine's experts instead, weighted by its own router's probabilities of them, so that
the gradient still reaches the router.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


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


@dataclass
class RoutingCount:
    """Mismatched and compared token x layer rows, summed over a step's forwards."""

    mismatched: int = 0
    compared: int = 0

    def add(self, own: Tensor, engine: Tensor) -> None:
        differ, rows = mismatched(own, engine)
        self.mismatched += differ
        self.compared += rows
