"""Mixture-of-experts feed-forward blocks of Qwen3-MoE and Qwen2-MoE, under HF's checkpoint names.

A router (`mlp.gate`) scores every expert per token; the top-k are kept, their softmax weights
renormalized when the checkpoint says so; each expert (`mlp.experts.E.{gate,up,down}_proj`) runs
only on the tokens routed to it. Qwen2-MoE adds a shared expert every token goes through, scaled
by a sigmoid gate of its own. The numerics follow transformers' forward step for step (router
softmax in fp32, weights cast back to the activations' dtype) so logits match it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from loongsage.inference.embedded.layers import Linear, linear


@dataclass(frozen=True)
class MoeShape:
    num_experts: int
    top_k: int
    norm_topk_prob: bool
    intermediate_size: int  # of each routed expert
    shared_intermediate_size: int  # 0: no shared expert
    sparse_layers: frozenset[int]  # the rest keep a dense MLP of the model's intermediate_size

    @classmethod
    def from_config(cls, raw: dict, num_layers: int) -> MoeShape | None:
        """None for a dense model; HF's rule for which layers are sparse (decoder_sparse_step, mlp_only_layers).
        Qwen3-MoE checkpoints say `num_experts`; transformers 5 writes it as `num_local_experts`."""
        experts = raw.get("num_experts") or raw.get("num_local_experts") or 0
        if not experts:
            return None
        step = raw.get("decoder_sparse_step") or 1
        dense = set(raw.get("mlp_only_layers") or [])
        return cls(
            num_experts=experts,
            top_k=raw["num_experts_per_tok"],
            norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
            intermediate_size=raw["moe_intermediate_size"],
            shared_intermediate_size=raw.get("shared_expert_intermediate_size") or 0,
            sparse_layers=frozenset(i for i in range(num_layers) if i not in dense and (i + 1) % step == 0),
        )


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False):
        super().__init__()
        self.gate_proj = Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # gate/up stay separate: fused into one [2I, H] matmul they measured slower on CPU.
        gate = linear(x, self.gate_proj.weight, self.gate_proj.bias)
        up = linear(x, self.up_proj.weight, self.up_proj.bias)
        return linear(F.silu(gate) * up, self.down_proj.weight, self.down_proj.bias)


class SparseMoe(nn.Module):
    def __init__(self, shape: MoeShape, hidden_size: int):
        super().__init__()
        self.shape = shape
        self.gate = Linear(hidden_size, shape.num_experts, bias=False)
        self.experts = nn.ModuleList(GatedMLP(hidden_size, shape.intermediate_size) for _ in range(shape.num_experts))
        if shape.shared_intermediate_size:
            self.shared_expert = GatedMLP(hidden_size, shape.shared_intermediate_size)
            self.shared_expert_gate = Linear(hidden_size, 1, bias=False)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [N, hidden] -> (weights [N, k] in x's dtype, expert ids [N, k])."""
        probs = F.softmax(linear(x, self.gate.weight), dim=-1, dtype=torch.float)
        weights, ids = torch.topk(probs, self.shape.top_k, dim=-1)
        if self.shape.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), ids

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [..., hidden] -> (output like x, the chosen experts' ids [..., k])."""
        flat = x.reshape(-1, x.shape[-1])
        weights, chosen = self.route(flat)
        out = self._experts(flat, weights, chosen)
        if self.shape.shared_intermediate_size:
            gate = torch.sigmoid(linear(flat, self.shared_expert_gate.weight))
            out = out + gate * self.shared_expert(flat)
        return out.view(x.shape), chosen.view(*x.shape[:-1], -1)

    def _experts(self, flat: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(flat)
        # Tokens grouped by expert: each expert's matmuls run once over the tokens sent to it.
        order = ids.flatten().argsort(stable=True)
        counts = torch.bincount(ids.flatten(), minlength=self.shape.num_experts).tolist()
        tokens, slots = order // self.shape.top_k, order % self.shape.top_k
        start = 0
        for expert, count in enumerate(counts):
            if not count:
                continue
            rows, k = tokens[start : start + count], slots[start : start + count]
            start += count
            expert_out = self.experts[expert](flat[rows]) * weights[rows, k, None]
            out.index_add_(0, rows, expert_out)
        return out
