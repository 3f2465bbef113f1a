"""`python -m loongsage.training.megatron.hf_convert` both ways, as a user runs it (its own process and gloo group)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loongsage.models.safetensors_io import SafetensorsReader
from tests.paths import REPO_ROOT


def _convert(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loongsage.training.megatron.hf_convert", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(params=["tiny", "tiny-moe"])
def model_path(request) -> str:
    """The tiny Llama, and the tiny Qwen3-MoE (one tensor per expert in its files)."""
    from loongsage.models.tiny import tiny_dir, tiny_moe_dir

    return str({"tiny": tiny_dir, "tiny-moe": tiny_moe_dir}[request.param]())


def test_hf_to_megatron_to_hf_is_bit_identical(tmp_path, model_path):
    import torch

    megatron_dir, hf_dir = tmp_path / "megatron", tmp_path / "hf"
    forward = _convert("hf-to-megatron", model_path, str(megatron_dir))
    assert forward.returncode == 0, forward.stderr
    assert (megatron_dir / "latest_checkpointed_iteration.txt").read_text() == "release"
    assert (megatron_dir / "release" / ".metadata").is_file()  # torch_dist's own index
    metadata = json.loads((megatron_dir / "loongsage_convert.json").read_text())
    assert metadata["dtype"] == "float32" and metadata["vocab_size"] == metadata["padded_vocab_size"] == 49152
    back = _convert("megatron-to-hf", str(megatron_dir), str(hf_dir))
    assert back.returncode == 0, back.stderr

    with SafetensorsReader(model_path) as original, SafetensorsReader(hf_dir) as converted:
        assert converted.names == original.names
        for name in original.names:
            assert torch.equal(converted.tensor(name), original.tensor(name)), name
    source = Path(model_path)
    assert {p.name for p in hf_dir.iterdir()} == {p.name for p in source.iterdir()}
    for copied in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (hf_dir / copied).read_bytes() == (source / copied).read_bytes()
    assert not list(tmp_path.glob(".*partial*"))
