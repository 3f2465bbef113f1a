"""The pure per-tensor core: HF -> megatron -> tensor-parallel shards -> megatron -> HF, bit-exact."""

from __future__ import annotations

import json

import pytest
import torch

from loongsage.training.megatron.mapping import model_spec, padded_vocab_size
from loongsage.training.megatron.weight_layout import (
    TpSplit,
    WeightLayout,
    expert_owner,
    from_megatron,
    fuse_qkv,
    hf_names,
    shard,
    stage_rules,
    to_megatron,
    unshard,
)
from tests.unit.training.megatron.hf_models import random_hf_model, save_random_hf_model, stored_state

MOE_FAMILIES = ("qwen3_moe", "qwen2_moe")


def _layout(spec, tp: int, norms_in_linears: bool = False, ep: int = 1, grouped_experts: bool = False) -> WeightLayout:
    return WeightLayout(
        spec=spec,
        tp=tp,
        padded_vocab=padded_vocab_size(spec.vocab_size, tp),
        norms_in_linears=norms_in_linears,
        ep=ep,
        grouped_experts=grouped_experts,
    )


def _round_trip(hf_state: dict, spec, tp: int, norms_in_linears: bool) -> dict:
    layout = _layout(spec, tp, norms_in_linears)
    rules = stage_rules(layout, range(spec.num_layers), 0, pre_process=True, post_process=True)
    back = {}
    for rule in rules:
        full = to_megatron(layout, rule, [hf_state[name] for name in rule.hf])
        pieces = [shard(layout, rule, full, rank) for rank in range(tp)]
        for name, tensor in zip(rule.hf, from_megatron(layout, rule, unshard(layout, rule, pieces))):
            assert tensor.is_contiguous()
            back[name] = tensor
    return back


@pytest.fixture(scope="module")
def hf_states(hf_tiny):
    states = {"tiny": (hf_tiny.config, hf_tiny.state_dict())}
    for family in ("qwen2", "qwen3", "llama"):
        model = random_hf_model(family)
        states[family] = (model.config, model.state_dict())
    return states


@pytest.mark.parametrize("model", ["tiny", "qwen2", "qwen3", "llama"])
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("norms_in_linears", [False, True], ids=["local-spec", "te-spec"])
def test_round_trip_is_bit_exact(hf_states, model, tp, norms_in_linears):
    config, state = hf_states[model]
    spec = model_spec(config)
    if spec.tie_word_embeddings:
        state = {name: tensor for name, tensor in state.items() if name != "lm_head.weight"}  # HF's alias, not stored
    back = _round_trip(state, spec, tp, norms_in_linears)
    assert back.keys() == state.keys()
    for name, tensor in state.items():
        assert torch.equal(back[name], tensor), name


@pytest.fixture(scope="module")
def moe_states(tmp_path_factory):
    """The MoE models as their files hold them: one tensor per expert."""
    states = {}
    for family in MOE_FAMILIES:
        hf_dir = save_random_hf_model(family, tmp_path_factory.mktemp(family))
        states[family] = (json.loads((hf_dir / "config.json").read_text()), stored_state(hf_dir))
    return states


@pytest.mark.parametrize("model", MOE_FAMILIES)
@pytest.mark.parametrize(("tp", "ep"), [(1, 1), (1, 2), (2, 1), (2, 2), (1, 4)])
@pytest.mark.parametrize(("norms_in_linears", "grouped_experts"), [(False, False), (True, True)], ids=["local-spec", "te-spec"])
def test_experts_round_trip_bit_exact_over_expert_ranks(moe_states, model, tp, ep, norms_in_linears, grouped_experts):
    """Each expert-parallel rank's rules hold its own experts (local indices 0..E/ep-1) and the
    same rest; together they convert every HF tensor back exactly, each expert from one rank."""
    config, state = moe_states[model]
    spec = model_spec(config)
    layout = _layout(spec, tp, norms_in_linears, ep, grouped_experts)
    layers = range(spec.num_layers)
    back: dict = {}
    shared = None
    for ep_rank in range(ep):
        rules = stage_rules(layout, layers, 0, pre_process=True, post_process=True, ep_rank=ep_rank)
        experts = [rule for rule in rules if rule.expert is not None]
        assert {expert_owner(layout, rule.expert) for rule in experts} == {ep_rank}
        assert len({rule.megatron for rule in experts}) == len(experts) == 2 * (spec.num_experts // ep) * len(spec.moe_layers)
        rest = [rule for rule in rules if rule.expert is None]
        assert shared is None or rest == shared
        shared = rest
        for rule in rules if ep_rank == 0 else experts:
            full = to_megatron(layout, rule, [state[name] for name in rule.hf])
            pieces = [shard(layout, rule, full, rank) for rank in range(tp)]
            for name, tensor in zip(rule.hf, from_megatron(layout, rule, unshard(layout, rule, pieces))):
                assert name not in back, f"{name} converted twice"
                back[name] = tensor
    expected = {name: tensor for name, tensor in state.items() if not name.endswith(".inv_freq")}
    assert back.keys() == expected.keys() == hf_names(layout)
    for name, tensor in expected.items():
        assert torch.equal(back[name], tensor), name


def test_moe_layer_parameter_names_are_megatrons(moe_states):
    """The names megatron gives (read off GPTModel.named_parameters of both specs)."""
    config, _ = moe_states["qwen2_moe"]
    spec = model_spec(config)
    local = {r.megatron: r for r in stage_rules(_layout(spec, 1, ep=2), [1], 1, False, False, ep_rank=1)}
    assert local["decoder.layers.0.pre_mlp_layernorm.weight"].hf == ("model.layers.1.post_attention_layernorm.weight",)
    assert local["decoder.layers.0.mlp.router.weight"].hf == ("model.layers.1.mlp.gate.weight",)
    fc1 = local["decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight"]
    assert fc1.expert == 2 and fc1.hf == (
        "model.layers.1.mlp.experts.2.gate_proj.weight",
        "model.layers.1.mlp.experts.2.up_proj.weight",
    )
    assert local["decoder.layers.0.mlp.experts.local_experts.1.linear_fc2.weight"].hf == (
        "model.layers.1.mlp.experts.3.down_proj.weight",
    )
    assert local["decoder.layers.0.mlp.shared_experts.gate_weight"].hf == ("model.layers.1.mlp.shared_expert_gate.weight",)
    assert local["decoder.layers.0.mlp.shared_experts.linear_fc1.weight"].split is TpSplit.GATE_UP
    grouped = {r.megatron for r in stage_rules(_layout(spec, 1, True, 2, True), [1], 1, False, False, ep_rank=1)}
    assert {"decoder.layers.0.mlp.experts.linear_fc1.weight1", "decoder.layers.0.mlp.experts.linear_fc2.weight0"} <= grouped
    assert "decoder.layers.0.pre_mlp_layernorm.weight" in grouped  # an MoE layer's norm stays a module under TE


def test_every_hf_tensor_has_exactly_one_rule(hf_states):
    for config, state in hf_states.values():
        spec = model_spec(config)
        stored = set(state) - ({"lm_head.weight"} if spec.tie_word_embeddings else set())
        assert hf_names(_layout(spec, 1)) == stored


def test_fused_qkv_is_megatrons_query_group_order(hf_states):
    """Per query group: its q heads, then its k head, then its v head (megatron's
    SelfAttention.get_query_key_value_tensors reads them so)."""
    config, _ = hf_states["qwen3"]
    spec = model_spec(config)
    heads, groups, d = spec.num_attention_heads, spec.num_query_groups, spec.head_dim
    q = torch.arange(heads * d).float()[:, None] * torch.ones(1, 3)
    k, v = (
        -1 - torch.arange(groups * d).float()[:, None] * torch.ones(1, 3),
        1000 + torch.arange(groups * d).float()[:, None] * torch.ones(1, 3),
    )
    fused = fuse_qkv(q, k, v, spec)
    per_group = heads // groups
    expected = []
    for g in range(groups):
        expected += [q[(g * per_group + h) * d : (g * per_group + h + 1) * d] for h in range(per_group)]
        expected += [k[g * d : (g + 1) * d], v[g * d : (g + 1) * d]]
    assert torch.equal(fused, torch.cat(expected))


def test_tensor_parallel_pieces_are_whole_query_groups_and_gate_up_halves(hf_states):
    config, state = hf_states["tiny"]
    spec = model_spec(config)
    layout = _layout(spec, 2)
    rules = {rule.megatron: rule for rule in stage_rules(layout, [0], 0, True, True)}
    fc1 = rules["decoder.layers.0.mlp.linear_fc1.weight"]
    gate, up = state["model.layers.0.mlp.gate_proj.weight"], state["model.layers.0.mlp.up_proj.weight"]
    piece = shard(layout, fc1, to_megatron(layout, fc1, [gate, up]), 1)
    half = gate.shape[0] // 2
    assert torch.equal(piece, torch.cat([gate[half:], up[half:]]))
    qkv = rules["decoder.layers.0.self_attention.linear_qkv.weight"]
    q, k, v = (state[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qkv")
    piece = shard(layout, qkv, to_megatron(layout, qkv, [q, k, v]), 1)
    d = spec.head_dim  # tiny: 4 heads in 2 groups; rank 1 holds group 1 = q heads 2, 3, k head 1, v head 1
    assert torch.equal(piece, torch.cat([q[2 * d : 4 * d], k[d : 2 * d], v[d : 2 * d]]))
    proj = rules["decoder.layers.0.self_attention.linear_proj.weight"]
    o = state["model.layers.0.self_attn.o_proj.weight"]
    assert torch.equal(shard(layout, proj, o, 0), o[:, : o.shape[1] // 2])


def test_vocabulary_rows_are_padded_with_zeros_and_dropped_on_the_way_back(hf_states):
    config, state = hf_states["qwen2"]
    spec = model_spec(config)
    layout = _layout(spec, 2)
    rule = stage_rules(layout, [], 0, True, False)[0]
    full = to_megatron(layout, rule, [state["model.embed_tokens.weight"]])
    assert full.shape[0] == 1024 and not full[1000:].any()
    assert shard(layout, rule, full, 1).shape[0] == 512
    assert torch.equal(from_megatron(layout, rule, full)[0], state["model.embed_tokens.weight"])


def test_pipeline_stage_rules_use_local_layer_numbers():
    from tests.unit.training.megatron.hf_models import hf_config

    spec = model_spec(hf_config("llama"))
    layout = _layout(spec, 1)
    first = stage_rules(layout, [0, 1], 0, pre_process=True, post_process=False)
    last = stage_rules(layout, [2, 3], 2, pre_process=False, post_process=True)
    assert first[0].megatron == "embedding.word_embeddings.weight"
    assert {r.megatron.split(".")[2] for r in last if r.megatron.startswith("decoder.layers")} == {"0", "1"}
    assert {r.hf[0].split(".")[2] for r in last if r.hf[0].startswith("model.layers")} == {"2", "3"}
    assert last[-1].megatron == "output_layer.weight" and last[-1].hf == ("lm_head.weight",)


def test_tied_embeddings_on_a_last_stage_of_its_own_load_from_the_embedding():
    from tests.unit.training.megatron.hf_models import hf_config

    spec = model_spec(hf_config("llama", tie_word_embeddings=True))
    layout = _layout(spec, 1)
    assert stage_rules(layout, [2, 3], 2, pre_process=False, post_process=True)[-1].hf == ("model.embed_tokens.weight",)
    assert all(r.megatron != "output_layer.weight" for r in stage_rules(layout, range(4), 0, True, True))
