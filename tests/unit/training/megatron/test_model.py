"""Megatron's forward on converted weights against transformers' own model, fp32, on one rank.

The reference is HF's eager attention: megatron's local attention computes the same math
(scores, masked softmax, weighted sum), and the logits agree to the last bit (max |diff| 0.0
for tiny and SmolLM2). HF's default SDPA attention differs from HF's own eager attention by up
to 1e-4 on SmolLM2's logits, so SDPA is checked against the 1e-4 budget.
"""

from __future__ import annotations

import json

import pytest
import torch

from loongsage.training.megatron.convert import load_hf_weights
from loongsage.training.megatron.mapping import model_spec
from loongsage.training.megatron.model import build_model, causal_mask, forward_logits, gpt_model
from tests.unit.training.megatron.hf_models import VOCAB, hf_config, save_random_hf_model

pytestmark = pytest.mark.usefixtures("megatron_single_rank")

PARITY = 1e-4


def _ids(vocab: int, rows: int = 2, length: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, vocab, (rows, length), generator=torch.Generator().manual_seed(seed))
    return ids, torch.arange(length).expand(rows, length)


def _megatron(hf_dir):
    spec = model_spec(json.loads((hf_dir / "config.json").read_text()))
    model = build_model(spec)
    load_hf_weights(model, hf_dir, spec)
    return model.eval(), spec


def _hf(hf_dir, attention: str = "eager"):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation=attention).eval()


def _max_diff(megatron_logits: torch.Tensor, hf_logits: torch.Tensor) -> float:
    return (megatron_logits[..., : hf_logits.shape[-1]] - hf_logits).abs().max().item()


@torch.no_grad()
def test_tiny_logits_match_hf(tiny_model_path, hf_tiny):
    from pathlib import Path

    model, spec = _megatron(Path(tiny_model_path))
    ids, positions = _ids(spec.vocab_size)
    logits = forward_logits(model, ids, positions)
    assert logits.shape == (2, 12, 49152)
    eager = _max_diff(logits, _hf(tiny_model_path)(ids).logits)
    sdpa = _max_diff(logits, hf_tiny(ids).logits)
    print(f"tiny: max |megatron - hf eager| = {eager:.3g}, max |megatron - hf sdpa| = {sdpa:.3g}")
    assert eager <= PARITY and sdpa <= PARITY


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
@torch.no_grad()
def test_random_family_logits_match_hf(tmp_path, family):
    hf_dir = save_random_hf_model(family, tmp_path / family)
    model, spec = _megatron(hf_dir)
    ids, positions = _ids(VOCAB, length=16)
    logits = forward_logits(model, ids, positions)
    assert logits.shape == (2, 16, 1024)  # vocabulary 1000 padded to 1024
    assert torch.isneginf(logits[..., VOCAB:]).all(), "padded vocabulary columns must never count"
    diff = _max_diff(logits, _hf(hf_dir)(ids).logits)
    print(f"{family}: max |megatron - hf eager| = {diff:.3g}")
    assert diff <= PARITY


MOE_CASES = {
    "qwen3_moe-dense-layer-0": ("qwen3_moe", {}),
    "qwen3_moe-all-sparse-not-renormalized": ("qwen3_moe", dict(mlp_only_layers=[], norm_topk_prob=False)),
    "qwen2_moe-shared-expert": ("qwen2_moe", {}),
    "qwen2_moe-every-other-layer-renormalized": ("qwen2_moe", dict(decoder_sparse_step=2, norm_topk_prob=True)),
}


@pytest.mark.parametrize("case", MOE_CASES)
@torch.no_grad()
def test_mixture_of_experts_logits_match_hf(tmp_path, case):
    """Routing is exactly HF's: with random routers the top-k differ from token to token, and a
    token sent to another expert would move its logits by far more than the budget."""
    family, overrides = MOE_CASES[case]
    hf_dir = save_random_hf_model(family, tmp_path / family, **overrides)
    model, spec = _megatron(hf_dir)
    assert spec.is_moe
    ids, positions = _ids(VOCAB, length=16)
    logits = forward_logits(model, ids, positions)
    diff = _max_diff(logits, _hf(hf_dir)(ids).logits)
    print(f"{case}: max |megatron - hf eager| = {diff:.3g}")
    assert diff <= PARITY


@torch.no_grad()
def test_tiny_moe_logits_match_hf():
    from loongsage.models.tiny import tiny_moe_dir

    hf_dir = tiny_moe_dir()
    model, spec = _megatron(hf_dir)
    ids, positions = _ids(spec.vocab_size)
    diff = _max_diff(forward_logits(model, ids, positions), _hf(hf_dir)(ids).logits)
    print(f"tiny-moe: max |megatron - hf eager| = {diff:.3g}")
    assert diff <= PARITY


def test_moe_logits_carry_gradients_to_every_parameter(tmp_path):
    """Routers included: through the top-k weights and the load-balancing loss."""
    hf_dir = save_random_hf_model("qwen2_moe", tmp_path / "qwen2_moe")
    model, spec = _megatron(hf_dir)
    ids, positions = _ids(VOCAB, length=16)
    forward_logits(model.train(), ids, positions)[..., :VOCAB].log_softmax(-1).mean().backward()
    missing = [name for name, param in model.named_parameters() if param.grad is None or not param.grad.abs().sum() > 0]
    assert missing == []


def test_expert_parallel_size_is_checked_against_the_model(monkeypatch):
    from megatron.core import parallel_state as ps

    monkeypatch.setattr(ps, "get_expert_model_parallel_world_size", lambda: 2)
    with pytest.raises(ValueError, match=r"trainer.megatron.ep=2: the model \(llama\) has no experts"):
        build_model(model_spec(hf_config("llama")))
    monkeypatch.setattr(ps, "get_expert_model_parallel_world_size", lambda: 3)
    with pytest.raises(ValueError, match="num_experts=4 does not split over trainer.megatron.ep=3"):
        build_model(model_spec(hf_config("qwen3_moe")))


def test_every_norm_of_the_local_spec_can_run_sequence_parallel():
    """megatron's plain-torch norm leaves its weight unmarked, and an unmarked norm's gradient
    would not be summed over the tensor-parallel ranks' slices of the sequence."""
    from loongsage.training.megatron.norm import LocalRMSNorm

    model = build_model(model_spec(hf_config("qwen3_moe")))  # qk-norm, dense and MoE layers
    norms = [module for module in model.modules() if isinstance(module, torch.nn.RMSNorm)]
    layers = len(gpt_model(model).decoder.layers)
    assert len(norms) == 4 * layers + 1  # input, pre-MLP, q and k per layer; the final norm
    assert all(type(norm) is LocalRMSNorm for norm in norms)


def test_a_sequence_parallel_length_must_split_over_the_tensor_parallel_ranks():
    from types import SimpleNamespace

    from loongsage.training.megatron.model import _check_length

    config = SimpleNamespace(sequence_parallel=True, tensor_model_parallel_size=2)
    _check_length(12, config)
    with pytest.raises(ValueError, match="13 positions under sequence parallelism.*multiple of trainer.megatron.tp=2"):
        _check_length(13, config)
    _check_length(13, SimpleNamespace(sequence_parallel=False, tensor_model_parallel_size=1))


@pytest.mark.slow
@torch.no_grad()
def test_smollm2_135m_logits_match_hf():
    from loongsage.models import resolve_model_path

    hf_dir = resolve_model_path("smollm2-135m")
    model, spec = _megatron(hf_dir)
    ids, positions = _ids(spec.vocab_size, length=16)
    logits = forward_logits(model, ids, positions)
    eager = _max_diff(logits, _hf(hf_dir)(ids).logits)
    sdpa = _max_diff(logits, _hf(hf_dir, "sdpa")(ids).logits)
    print(f"SmolLM2-135M: max |megatron - hf eager| = {eager:.3g}, max |megatron - hf sdpa| = {sdpa:.3g}")
    assert eager <= PARITY and sdpa <= PARITY


@pytest.mark.slow
@torch.no_grad()
def test_smollm2_moe_logits_match_hf_and_the_embedded_engine():
    """The upcycled SmolLM2 (Qwen2-MoE, 30 layers of 4 experts) on the same weights in megatron,
    transformers and the embedded engine."""
    from loongsage.inference.embedded.weights import load_model
    from loongsage.models import resolve_model_path

    hf_dir = resolve_model_path("smollm2-moe")
    model, spec = _megatron(hf_dir)
    ids, positions = _ids(spec.vocab_size, length=16)
    logits = forward_logits(model, ids, positions)
    del model
    hf = _max_diff(logits, _hf(hf_dir)(ids).logits)
    engine_model = load_model(hf_dir)
    engine = _max_diff(logits, torch.stack([engine_model.logits(engine_model.prefill(row)[0]) for row in ids]))
    print(f"smollm2-moe: max |megatron - hf eager| = {hf:.3g}, max |megatron - embedded engine| = {engine:.3g}")
    # The engine sums its experts in another order than megatron's grouped GEMM, over 30 layers in
    # float32: its largest difference straddles 1e-4 with the CPU's BLAS kernels (1.02e-4 on CI's).
    assert hf <= PARITY and engine <= 2 * PARITY


@torch.no_grad()
def test_first_position_skips_the_output_layer_for_leading_positions(tiny_model_path):
    from pathlib import Path

    model, spec = _megatron(Path(tiny_model_path))
    ids, positions = _ids(spec.vocab_size)
    full = forward_logits(model, ids, positions)
    tail = forward_logits(model, ids, positions, first_position=5)
    assert tail.shape == (2, 7, spec.vocab_size)
    torch.testing.assert_close(tail, full[:, 5:], rtol=0, atol=1e-5)


def test_logits_carry_gradients_to_every_parameter(tiny_model_path):
    from pathlib import Path

    model, spec = _megatron(Path(tiny_model_path))
    ids, positions = _ids(spec.vocab_size)
    forward_logits(model.train(), ids, positions).log_softmax(-1).mean().backward()
    assert all(param.grad is not None and param.grad.abs().sum() > 0 for param in model.parameters())


def test_position_ids_other_than_0_to_t_are_refused(tiny_model_path):
    from pathlib import Path

    model, spec = _megatron(Path(tiny_model_path))
    ids, positions = _ids(spec.vocab_size)
    with pytest.raises(ValueError, match="position_ids"):
        forward_logits(model, ids, positions + 1)


def test_causal_mask_masks_the_future_and_is_cached():
    mask = causal_mask(4, "cpu")
    assert mask.shape == (1, 1, 4, 4) and mask.dtype == torch.bool
    assert mask[0, 0].tolist() == [
        [False, True, True, True],
        [False, False, True, True],
        [False, False, False, True],
        [False, False, False, False],
    ]
    assert causal_mask(4, "cpu") is mask


@pytest.mark.parametrize(
    "rope",
    [
        dict(
            rope_type="llama3",
            rope_theta=500000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        ),
        dict(rope_type="linear", rope_theta=10000.0, factor=4.0),
        dict(rope_type="default", rope_theta=123456.0),
    ],
    ids=lambda rope: rope["rope_type"],
)
def test_rope_angles_match_hf(rope):
    """The rotary tables megatron builds from the mapped settings are HF's (llama3 scaling
    changes only wavelengths beyond 2048 positions: compared over 4096)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = hf_config("llama", rope_parameters=rope, max_position_embeddings=16384, num_hidden_layers=1)
    gpt = gpt_model(build_model(model_spec(config)))
    length = 4096
    angles = gpt.rotary_pos_emb(length)[:, 0, 0, :]  # [T, head_dim]
    hf_cos, hf_sin = LlamaRotaryEmbedding(config)(torch.zeros(1), torch.arange(length)[None])
    torch.testing.assert_close(torch.cos(angles), hf_cos[0], rtol=0, atol=2e-4)
    torch.testing.assert_close(torch.sin(angles), hf_sin[0], rtol=0, atol=2e-4)


def test_tensor_parallel_size_that_splits_no_head_evenly_is_refused(monkeypatch):
    from megatron.core import parallel_state as ps

    monkeypatch.setattr(ps, "get_tensor_model_parallel_world_size", lambda: 3)
    with pytest.raises(ValueError, match="num_attention_heads=4 does not split over trainer.megatron.tp=3"):
        build_model(model_spec(hf_config("llama")))
