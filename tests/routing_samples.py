"""Samples carrying an engine's routing (R3) for trainer tests: the routing transformers computes
for them, as an engine on the same weights would return it, and a variant that differs from it."""

from __future__ import annotations

import numpy as np
import torch

from loongsage.sample import Sample


def engine_routing(model_path: str, samples: list[Sample]) -> list[np.ndarray]:
    """Per sample, the experts the HF model routes each position but the last to
    [tokens - 1, layers * k] (int32), as an engine returns them."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    return [_routed(model, s.prompt_ids + s.response_ids)[:-1].numpy().astype(np.int32) for s in samples]


def _routed(model, ids: list[int]) -> torch.Tensor:
    picked = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda _m, _a, o: picked.append(o[2])) for layer in model.model.layers]
    with torch.no_grad():
        model(torch.tensor([ids]))
    for hook in hooks:
        hook.remove()
    return torch.cat(picked, dim=-1)


def shifted(routing: list[np.ndarray], every: int, experts: int) -> tuple[list[np.ndarray], float]:
    """Every `every`-th position moved to other experts in every layer: (the routing, the fraction
    of token x layer top-k sets changed). Adding 1 modulo the expert count keeps a set's ids
    distinct and changes the set."""
    out, changed, positions = [], 0, 0
    for routed in routing:
        routed = routed.copy()
        routed[::every] = (routed[::every] + 1) % experts
        out.append(routed)
        changed += len(routed[::every])
        positions += len(routed)
    return out, changed / positions


def with_routing(samples: list[Sample], routing: list[np.ndarray]) -> list[Sample]:
    """Copies of `samples` carrying `routing`."""
    from dataclasses import replace

    return [replace(sample, routed_experts=routed) for sample, routed in zip(samples, routing)]
