"""Our Llama forward against transformers on the tiny model (fp32)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from loongsage.inference.embedded.kv_cache import KVCache
from loongsage.inference.embedded.llama import ModelConfig, UnsupportedModelError
from loongsage.inference.embedded.weights import WeightError, apply_named_tensors, load_model

torch.set_num_threads(1)


def _hf_logits(hf_tiny, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf_tiny(ids[None]).logits[0]


def test_prefill_and_batched_decode_match_transformers(tiny_model_path, hf_tiny):
    model = load_model(tiny_model_path)
    ids = torch.randint(0, model.cfg.vocab_size, (24,), generator=torch.Generator().manual_seed(0))
    ref = _hf_logits(hf_tiny, ids)

    hidden, keys, values = model.prefill(ids)
    assert torch.allclose(model.logits(hidden), ref, atol=1e-5)

    # Two sequences of different lengths decode together; the shorter one must not see the
    # longer one's padding columns.
    cfg = model.cfg
    cache = KVCache(cfg.num_layers, 2, cfg.num_kv_heads, cfg.head_dim, 64, torch.float32, chunk=8)
    cache.write(0, *model.prefill(ids[:12])[1:])
    cache.write(1, *model.prefill(ids[:5])[1:])
    for step in range(12):
        positions = torch.tensor([12 + step, 5 + step])
        cache.ensure(int(positions.max()) + 1)
        hidden = model.decode(ids[positions], positions, cache.keys, cache.values)
        assert torch.allclose(model.logits(hidden), ref[positions], atol=1e-5)
    assert cache.capacity == 24  # grown in chunks of 8


def test_right_padded_batched_prefill_matches_transformers(tiny_model_path, hf_tiny):
    model = load_model(tiny_model_path)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, model.cfg.vocab_size, (n,), generator=gen) for n in (9, 16, 3)]
    hidden, keys, values = model.prefill_batch(prompts)
    for i, ids in enumerate(prompts):
        n = ids.shape[0]
        assert torch.allclose(model.logits(hidden[i, :n]), _hf_logits(hf_tiny, ids), atol=1e-5)
        _, alone_keys, alone_values = model.prefill(ids)
        assert torch.allclose(keys[:, i, :, :n], alone_keys, atol=1e-5)
        assert torch.allclose(values[:, i, :, :n], alone_values, atol=1e-5)


def test_old_style_rope_config_with_null_scaling(tiny_model_path, hf_tiny, tmp_path):
    shutil.copytree(tiny_model_path, tmp_path / "m")
    config_path = tmp_path / "m" / "config.json"
    raw = json.loads(config_path.read_text())
    theta = raw.pop("rope_parameters")["rope_theta"]
    config_path.write_text(json.dumps({**raw, "rope_theta": theta, "rope_scaling": None}))
    model = load_model(tmp_path / "m")
    ids = torch.arange(1, 17)
    assert torch.allclose(model.logits(model.prefill(ids)[0]), _hf_logits(hf_tiny, ids), atol=1e-5)


def test_unsupported_architecture_is_named(tiny_model_path, tmp_path):
    shutil.copytree(tiny_model_path, tmp_path / "m")
    config_path = tmp_path / "m" / "config.json"
    raw = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**raw, "architectures": ["MistralForCausalLM"]}))
    with pytest.raises(UnsupportedModelError, match="MistralForCausalLM"):
        ModelConfig.from_dir(tmp_path / "m")


def test_bad_weight_bucket_leaves_model_untouched(tiny_model_path):
    model = load_model(tiny_model_path)
    before = model.model.norm.weight.clone()
    bucket = [("model.norm.weight", torch.zeros_like(before)), ("model.layers.0.mlp.up_proj.weight", torch.zeros(3))]
    with pytest.raises(WeightError, match="up_proj") as err:
        apply_named_tensors(model, bucket)
    assert err.value.name == "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(model.model.norm.weight, before)


def test_tied_lm_head_updates_with_embeddings(tiny_model_path):
    model = load_model(tiny_model_path)
    new = torch.randn_like(model.lm_head.weight)
    apply_named_tensors(model, [("lm_head.weight", new)])
    assert torch.equal(model.model.embed_tokens.weight, new)


def test_prefill_after_a_shared_prefix_matches_a_full_prefill(tiny_model_path, hf_tiny):
    model = load_model(tiny_model_path)
    gen = torch.Generator().manual_seed(2)
    prefix = torch.randint(0, model.cfg.vocab_size, (7,), generator=gen)
    suffixes = [torch.randint(0, model.cfg.vocab_size, (n,), generator=gen) for n in (5, 1, 9)]
    _, prefix_keys, prefix_values = model.prefill(prefix)
    hidden, keys, values = model.prefill_batch(suffixes, past=(prefix_keys, prefix_values))
    for i, suffix in enumerate(suffixes):
        n, full = suffix.shape[0], torch.cat((prefix, suffix))
        assert torch.allclose(model.logits(hidden[i, :n]), _hf_logits(hf_tiny, full)[7:], atol=1e-5)
        _, full_keys, full_values = model.prefill(full)
        assert torch.allclose(keys[:, i, :, :n], full_keys[:, :, 7:], atol=1e-5)
        assert torch.allclose(values[:, i, :, :n], full_values[:, :, 7:], atol=1e-5)
