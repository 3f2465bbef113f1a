"""HF files -> this rank's megatron model -> HF tensors, on one rank (tp = pp = 1); the
multi-rank paths are in tests/integration/training/megatron/test_megatron_parallel_weights.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from loongsage.models.safetensors_io import SafetensorsReader
from loongsage.training.megatron.convert import hf_weights, load_hf_weights
from loongsage.training.megatron.mapping import model_spec
from loongsage.training.megatron.model import build_model
from tests.unit.training.megatron.hf_models import random_hf_model, save_random_hf_model

pytestmark = pytest.mark.usefixtures("megatron_single_rank")


def _spec(hf_dir):
    return model_spec(json.loads((hf_dir / "config.json").read_text()))


def _stored(hf_dir) -> dict[str, torch.Tensor]:
    with SafetensorsReader(hf_dir) as reader:
        return {name: reader.tensor(name) for name in reader.names}


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
def test_hf_weights_give_back_the_stored_tensors_bit_exact(tmp_path, family):
    hf_dir = save_random_hf_model(family, tmp_path / family)
    spec = _spec(hf_dir)
    model = build_model(spec)
    load_hf_weights(model, hf_dir, spec)
    exported = list(hf_weights(model, spec))
    stored = _stored(hf_dir)
    assert [name for name, _ in exported].count("lm_head.weight") == (0 if spec.tie_word_embeddings else 1)
    assert {name for name, _ in exported} == set(stored)
    for name, tensor in exported:
        assert tensor.is_contiguous() and torch.equal(tensor, stored[name]), name


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_moe_hf_weights_give_back_the_stored_experts_bit_exact(tmp_path, family):
    """One tensor per expert in, each once out, in HF's order: router, experts 0..E-1, shared expert."""
    hf_dir = save_random_hf_model(family, tmp_path / family)
    spec = _spec(hf_dir)
    model = build_model(spec)
    load_hf_weights(model, hf_dir, spec)
    exported = list(hf_weights(model, spec))
    stored = _stored(hf_dir)
    names = [name for name, _ in exported]
    assert len(names) == len(set(names)) and set(names) == set(stored)
    for name, tensor in exported:
        assert torch.equal(tensor, stored[name]), name
    layer = [name for name in names if name.startswith("model.layers.1.mlp.")]
    assert layer[0] == "model.layers.1.mlp.gate.weight"
    experts = [int(name.split(".")[5]) for name in layer if ".mlp.experts." in name]
    assert experts == sorted(experts) == [e for e in range(4) for _ in range(3)]


def test_tiny_round_trip(tiny_model_path):
    from pathlib import Path

    spec = _spec(Path(tiny_model_path))
    model = build_model(spec)
    load_hf_weights(model, tiny_model_path, spec)
    stored = _stored(Path(tiny_model_path))
    exported = dict(hf_weights(model, spec))
    assert exported.keys() == stored.keys()
    assert all(torch.equal(exported[name], stored[name]) for name in stored)


def test_bf16_weights_stay_bf16_and_exact(tmp_path):
    model_hf = random_hf_model("qwen2").to(torch.bfloat16)
    model_hf.save_pretrained(tmp_path / "bf16")
    spec = _spec(tmp_path / "bf16")
    model = build_model(spec, dtype=torch.bfloat16)
    load_hf_weights(model, tmp_path / "bf16", spec)
    stored = _stored(tmp_path / "bf16")
    for name, tensor in hf_weights(model, spec):
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, stored[name]), name


def test_sharded_hf_checkpoints_load(tmp_path):
    model_hf = random_hf_model("llama")
    model_hf.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    spec = _spec(tmp_path / "sharded")
    model = build_model(spec)
    load_hf_weights(model, tmp_path / "sharded", spec)
    state = model_hf.state_dict()
    assert all(torch.equal(tensor, state[name]) for name, tensor in hf_weights(model, spec))


def _edit_weights(hf_dir, edit) -> None:
    weights = load_file(hf_dir / "model.safetensors")
    edit(weights)
    save_file(weights, hf_dir / "model.safetensors", metadata={"format": "pt"})


def test_missing_and_unexpected_hf_tensors_are_named(tmp_path):
    hf_dir = save_random_hf_model("qwen2", tmp_path / "m")

    def edit(weights):
        del weights["model.layers.1.self_attn.k_proj.bias"]
        weights["model.layers.0.mlp.extra.weight"] = torch.zeros(2)

    _edit_weights(hf_dir, edit)
    spec = _spec(hf_dir)
    with pytest.raises(ValueError) as error:
        load_hf_weights(build_model(spec), hf_dir, spec)
    assert "missing ['model.layers.1.self_attn.k_proj.bias']" in str(error.value)
    assert "unexpected ['model.layers.0.mlp.extra.weight']" in str(error.value)


def test_a_tied_alias_and_rope_buffers_in_the_file_are_accepted(tmp_path):
    hf_dir = save_random_hf_model("qwen3", tmp_path / "m")

    def edit(weights):
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()
        weights["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(12)

    _edit_weights(hf_dir, edit)
    spec = _spec(hf_dir)
    load_hf_weights(build_model(spec), hf_dir, spec)


def test_a_shape_the_config_does_not_describe_is_named(tmp_path):
    hf_dir = save_random_hf_model("llama", tmp_path / "m")
    _edit_weights(hf_dir, lambda weights: weights.__setitem__("model.layers.0.mlp.down_proj.weight", torch.zeros(64, 64)))
    spec = _spec(hf_dir)
    with pytest.raises(
        ValueError, match=r"decoder\.layers\.0\.mlp\.linear_fc2\.weight: model\.layers\.0\.mlp\.down_proj\.weight"
    ):
        load_hf_weights(build_model(spec), hf_dir, spec)


def test_a_directory_without_weights_is_named(tmp_path):
    hf_dir = save_random_hf_model("llama", tmp_path / "m")
    (hf_dir / "model.safetensors").unlink()
    spec = _spec(hf_dir)
    with pytest.raises(FileNotFoundError, match="holds no HF weights"):
        load_hf_weights(build_model(spec), hf_dir, spec)
