"""Megatron tensor, pipeline and expert parallelism over two real gloo processes: logits and
weights agree with one rank and with the HF files, and a checkpoint converted at tp=1 (ep=1)
loads at tp=2 (ep=2)."""

from __future__ import annotations

import pytest
import torch

from loongsage.models.safetensors_io import SafetensorsReader
from tests.integration.training.megatron.megatron_ranks import (
    expert_parallel_program,
    pipeline_parallel_program,
    run_ranks,
    tensor_parallel_program,
    token_ids,
)
from tests.unit.training.megatron.hf_models import save_random_hf_model


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory, tiny_model_path) -> dict[str, str]:
    root = tmp_path_factory.mktemp("hf")
    return {"tiny": tiny_model_path} | {
        family: str(save_random_hf_model(family, root / family))
        for family in ("qwen2", "qwen3", "llama", "qwen3_moe", "qwen2_moe")
    }


def _stored(hf_dir: str) -> dict[str, torch.Tensor]:
    with SafetensorsReader(hf_dir) as reader:
        return {name: reader.tensor(name) for name in reader.names}


def _hf_logits(hf_dir: str, vocab_size: int) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(token_ids(vocab_size)[0]).logits


def test_tensor_parallel_two_ranks(tmp_path, hf_dirs):
    models = {name: hf_dirs[name] for name in ("tiny", "qwen2", "qwen3")}
    run_ranks(tensor_parallel_program, 2, models, str(tmp_path / "results.pt"))
    results = torch.load(tmp_path / "results.pt", weights_only=False)
    for name, hf_dir in models.items():
        got = results[name]
        vocab = _stored(hf_dir)["model.embed_tokens.weight"].shape[0]
        tp_diff = (got["tp2_logits"] - got["tp1_logits"]).abs().nan_to_num()  # -inf - -inf on the padding
        assert torch.isneginf(got["tp2_logits"][..., vocab:]).all() and torch.isfinite(got["tp2_logits"][..., :vocab]).all()
        hf_diff = (got["tp2_logits"][..., :vocab] - _hf_logits(hf_dir, vocab)).abs().max().item()
        print(f"{name}: tp=2 vs tp=1 max |diff| {tp_diff.max().item():.3g}; vs HF {hf_diff:.3g}")
        assert tp_diff.max().item() <= 1e-5
        assert hf_diff <= 1e-4
        stored = _stored(hf_dir)
        assert got["tp1_dp2_weights"].keys() == stored.keys(), name
        assert got["tp2_weights"].keys() == stored.keys(), name
        for tensor_name, tensor in stored.items():
            assert torch.equal(got["tp2_weights"][tensor_name], tensor), f"{name}: {tensor_name}"
    assert results["tiny"]["tp2_local_vocab"] == 49152 // 2
    assert results["qwen2"]["tp2_local_vocab"] == 512  # 1000 padded to 1024: rank 1 holds the padding
    assert results["tiny"]["tp2_from_tp1_checkpoint_equal"]


def test_pipeline_parallel_two_ranks(tmp_path, hf_dirs):
    # tied with 2 layers, untied with 4, and experts in the second stage's layer only
    models = {name: hf_dirs[name] for name in ("tiny", "llama", "qwen3_moe")}
    run_ranks(pipeline_parallel_program, 2, models, str(tmp_path / "results.pt"))
    results = torch.load(tmp_path / "results.pt", weights_only=False)
    assert results["tiny"]["stage_layers"] == results["qwen3_moe"]["stage_layers"] == [[0], [1]]
    assert results["llama"]["stage_layers"] == [[0, 1], [2, 3]]
    for name, hf_dir in models.items():
        got = results[name]
        stored = _stored(hf_dir)
        vocab = stored["model.embed_tokens.weight"].shape[0]
        hf_diff = (got["pp2_logits"][..., :vocab] - _hf_logits(hf_dir, vocab)).abs().max().item()
        print(f"{name}: pp=2 vs HF max |diff| {hf_diff:.3g}")
        assert hf_diff <= 1e-4
        assert got["pp2_weights"].keys() == stored.keys(), name
        for tensor_name, tensor in stored.items():
            assert torch.equal(got["pp2_weights"][tensor_name], tensor), f"{name}: {tensor_name}"


def test_expert_parallel_two_ranks(tmp_path, hf_dirs):
    models = {name: hf_dirs[name] for name in ("qwen3_moe", "qwen2_moe")}
    run_ranks(expert_parallel_program, 2, models, str(tmp_path / "results.pt"))
    results = torch.load(tmp_path / "results.pt", weights_only=False)
    for name, hf_dir in models.items():
        got, stored = results[name], _stored(hf_dir)
        vocab = stored["model.embed_tokens.weight"].shape[0]
        reference = got["ep1_logits"][..., :vocab]
        hf_diff = (reference - _hf_logits(hf_dir, vocab)).abs().max().item()
        ep_diff = max((logits[..., :vocab] - reference).abs().max().item() for logits in got["ep2_logits"])
        tp_ep_diff = (got["tp2_ep2_logits"][..., :vocab] - reference).abs().max().item()
        print(f"{name}: ep=1 vs HF {hf_diff:.3g}; ep=2 vs ep=1 {ep_diff:.3g}; tp=2 ep=2 vs ep=1 {tp_ep_diff:.3g}")
        assert hf_diff <= 1e-4 and ep_diff <= 1e-5 and tp_ep_diff <= 1e-5

        # Rank 0 holds experts 0 and 1 of each MoE layer, as its local experts 0 and 1, and read no other expert.
        experts_read = {n.split(".mlp.experts.")[1].split(".")[0] for n in got["ep2_read"] if ".mlp.experts." in n}
        assert experts_read == {"0", "1"}
        assert {n for n in got["ep2_read"] if ".mlp.experts." not in n} == {n for n in stored if ".mlp.experts." not in n}
        assert {n.split("local_experts.")[1].split(".")[0] for n in got["ep2_local_experts"]} == {"0", "1"}

        # Every expert reaches rank 0 exactly once, bit-exact, at ep=2 and at tp=2 with ep=2.
        for key in ("ep2_weights", "tp2_ep2_weights"):
            names = [n for n, _ in got[key]]
            assert len(names) == len(set(names)) and set(names) == set(stored), f"{name} {key}"
            for tensor_name, tensor in got[key]:
                assert torch.equal(tensor, stored[tensor_name]), f"{name} {key}: {tensor_name}"
        assert got["ep2_every_replica_names"] == [sorted(stored)] * 2  # each replica's first rank gets all
        assert got["ep2_from_ep1_checkpoint_equal"]
