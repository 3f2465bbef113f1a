"""Sparse upcycling: the MoE model computes what the dense one does at step 0, loads in
transformers with nothing missing or left over, and its router spreads tokens over every expert."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from loongsage.inference.embedded.weights import load_model
from loongsage.models import resolve_model_path
from loongsage.models.tiny import tiny_moe_dir
from loongsage.models.upcycle import NUM_EXPERTS, upcycle

torch.set_num_threads(1)


def _assert_same_logits(dense: torch.Tensor, moe: torch.Tensor) -> None:
    """To 1e-5 of the logits' scale. Not bit-equal: w1 * y + w2 * y with w1 + w2 = 1 rounds apart
    from y, layer after layer (over SmolLM2's 30 layers, 6e-5 on logits up to ~30; transformers'
    own Qwen2-MoE and Llama differ as much on these weights)."""
    assert (moe - dense).abs().max() <= 1e-5 * dense.abs().max()


def test_upcycled_tiny_matches_the_dense_model_in_transformers(tiny_model_path, hf_tiny, tmp_path):
    upcycle(tiny_model_path, tmp_path / "moe")
    moe, info = AutoModelForCausalLM.from_pretrained(tmp_path / "moe", dtype=torch.float32, output_loading_info=True)
    assert type(moe).__name__ == "Qwen2MoeForCausalLM"
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    ids = torch.randint(0, hf_tiny.config.vocab_size, (1, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _assert_same_logits(hf_tiny(ids).logits, moe.eval()(ids).logits)


def test_smollm2_moe_matches_smollm2_and_routes_to_every_expert():
    dense, moe = load_model(resolve_model_path("smollm2-135m")), load_model(resolve_model_path("smollm2-moe"))
    assert moe.cfg.moe.num_experts == NUM_EXPERTS and len(moe.cfg.moe.sparse_layers) == moe.cfg.num_layers
    ids = torch.randint(0, dense.cfg.vocab_size, (128,), generator=torch.Generator().manual_seed(1))
    routed: list[torch.Tensor] = []
    _assert_same_logits(dense.logits(dense.prefill(ids)[0]), moe.logits(moe.prefill_batch([ids], routed=routed)[0][0]))
    for layer in routed:
        assert torch.bincount(layer.flatten(), minlength=NUM_EXPERTS).min() > 0


def test_only_a_dense_llama_is_upcycled(tmp_path):
    with pytest.raises(ValueError, match=r"architectures=\['Qwen3MoeForCausalLM'\]"):
        upcycle(tiny_moe_dir(), tmp_path / "moe")
