"""The embedded engine's building blocks: layers without a random init, RMSNorm, and its matmul."""

from __future__ import annotations

import torch
from torch import nn


class Linear(nn.Linear):
    """nn.Linear without its random init: every weight is read from the checkpoint (load_model
    refuses one that lacks any), so the init would be thrown away; done on the meta device
    instead, it imports torch's compiler, a second of CPU at every engine start."""

    def reset_parameters(self) -> None:
        pass


class Embedding(nn.Embedding):
    """nn.Embedding without its random init, as Linear."""

    def reset_parameters(self) -> None:
        pass


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear computed as (weight @ x.T).T, returned as a transposed view: MKL runs the skinny
    decode shapes (a handful to a few dozen rows against a weight that does not fit in cache)
    up to twice as fast in this orientation, and large prefill shapes equally fast."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.mm(weight, flat.t()) if bias is None else torch.addmm(bias[:, None], weight, flat.t())
    return out.t().view(*x.shape[:-1], weight.shape[0])
