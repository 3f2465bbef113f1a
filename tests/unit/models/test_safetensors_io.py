"""HF weights written in bounded shards and read back one tensor at a time."""

from __future__ import annotations

import json

import pytest
import torch

from loongsage.models.safetensors_io import INDEX_FILE, SINGLE_FILE, SafetensorsReader, write_safetensors


def _tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {f"model.layers.{i}.weight": torch.randn(16, 16, generator=generator, dtype=torch.float32) for i in range(5)} | {
        "model.norm.weight": torch.randn(16, generator=generator).to(torch.bfloat16)
    }


def test_small_models_are_one_file(tmp_path):
    tensors = _tensors()
    assert write_safetensors(tmp_path, iter(tensors.items())) == [tmp_path / SINGLE_FILE]
    with SafetensorsReader(tmp_path) as reader:
        assert reader.names == set(tensors)
        assert reader.dtype("model.norm.weight") == torch.bfloat16
        assert all(torch.equal(reader.tensor(name), tensor) for name, tensor in tensors.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == [SINGLE_FILE]


def test_shards_hold_at_most_the_bound_and_an_index_names_them(tmp_path):
    tensors = _tensors()
    written = write_safetensors(tmp_path, iter(tensors.items()), max_shard_bytes=2 * 16 * 16 * 4)
    assert [p.name for p in written] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)] + [INDEX_FILE]
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    assert set(index["weight_map"]) == set(tensors)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    with SafetensorsReader(tmp_path) as reader:
        assert all(torch.equal(reader.tensor(name), tensor) for name, tensor in tensors.items())
    assert not list(tmp_path.glob(".part-*"))


def test_a_name_given_twice_is_refused(tmp_path):
    tensor = torch.zeros(2)
    with pytest.raises(ValueError, match="'a' given twice"):
        write_safetensors(tmp_path, [("a", tensor), ("b", tensor), ("a", tensor)])


def test_directories_without_weights_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        SafetensorsReader(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="holds no HF weights"):
        SafetensorsReader(tmp_path)


def test_an_unknown_tensor_is_named(tmp_path):
    write_safetensors(tmp_path, [("a", torch.zeros(2))])
    with SafetensorsReader(tmp_path) as reader, pytest.raises(KeyError, match="no tensor 'b'"):
        reader.tensor("b")
