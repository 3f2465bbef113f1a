"""The embedded engine's mixture-of-experts forward against transformers (fp32): Qwen3-MoE,
Qwen2-MoE (shared expert), a model with a dense layer among sparse ones; and the experts it
reports choosing are the ones HF's router chooses."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from loongsage.inference.embedded.kv_cache import KVCache
from loongsage.inference.embedded.weights import load_model
from loongsage.models.tiny import build_tiny

torch.set_num_threads(1)

VARIANTS = {
    "qwen3_moe": ("Qwen3MoeForCausalLM", {}),
    "qwen2_moe": ("Qwen2MoeForCausalLM", {}),
    "qwen3_moe_dense_first_layer": ("Qwen3MoeForCausalLM", {"mlp_only_layers": [0]}),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def moe_dir(request, tmp_path_factory):
    architecture, fields = VARIANTS[request.param]
    return build_tiny(tmp_path_factory.mktemp(request.param), architecture, **fields)


def _hf(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def _hf_logits_and_experts(hf, ids: torch.Tensor):
    """Logits [T, V] and, per layer, the experts HF's router picks [T, k] (None for a dense layer)."""
    picked = []
    hooks = [
        layer.mlp.gate.register_forward_hook(lambda _m, _a, out: picked.append(out[2]))
        for layer in hf.model.layers
        if hasattr(layer.mlp, "gate")
    ]
    try:
        with torch.no_grad():
            logits = hf(ids[None]).logits[0]
    finally:
        for hook in hooks:
            hook.remove()
    return logits, picked


def test_prefill_and_decode_match_transformers_and_report_its_routing(moe_dir):
    model, hf = load_model(moe_dir), _hf(moe_dir)
    ids = torch.randint(0, model.cfg.vocab_size, (20,), generator=torch.Generator().manual_seed(0))
    ref, hf_experts = _hf_logits_and_experts(hf, ids)

    routed: list[torch.Tensor] = []
    hidden, keys, values = model.prefill_batch([ids], routed=routed)
    assert (model.logits(hidden[0]) - ref).abs().max() <= 1e-5
    sparse = [i for i, layer in enumerate(model.model.layers) if layer.sparse]
    assert len(routed) == model.cfg.num_layers and len(sparse) == len(hf_experts) > 0
    for layer, experts in enumerate(routed):
        if layer in sparse:
            # top-k order is the router's (descending weight), as HF returns it
            assert torch.equal(experts[0], hf_experts[sparse.index(layer)])
        else:
            assert (experts == -1).all()
    assert len({tuple(e) for e in routed[sparse[0]][0].tolist()}) > 1, "the router should not send every token alike"

    cfg = model.cfg
    cache = KVCache(cfg.num_layers, 1, cfg.num_kv_heads, cfg.head_dim, 32, torch.float32, chunk=8)
    cache.write(0, keys[:, 0, :, :10], values[:, 0, :, :10])
    for position in range(10, 20):
        step_routed: list[torch.Tensor] = []
        cache.ensure(position + 1)
        out = model.decode(ids[position : position + 1], torch.tensor([position]), cache.keys, cache.values, step_routed)
        assert (model.logits(out)[0] - ref[position]).abs().max() <= 1e-5
        assert torch.equal(step_routed[sparse[0]][0, 0], hf_experts[0][position])


def test_each_expert_runs_only_on_its_tokens(moe_dir):
    """An expert that no token chose is never called: zeroing it changes nothing."""
    model = load_model(moe_dir)
    ids = torch.arange(3, 7)
    routed: list[torch.Tensor] = []
    before = model.prefill_batch([ids], routed=routed)[0]
    layer = next(i for i, layer in enumerate(model.model.layers) if layer.sparse)
    unused = sorted(set(range(model.cfg.moe.num_experts)) - set(routed[layer].flatten().tolist()))
    if not unused:
        pytest.skip("every expert was chosen for these tokens")
    calls = []
    expert = model.model.layers[layer].mlp.experts[unused[0]]
    expert.register_forward_hook(lambda *_: calls.append(1))
    after = model.prefill_batch([ids])[0]
    assert calls == [] and torch.equal(before, after)
