"""HF configs -> megatron specs: what each family maps to, and what is refused by name."""

from __future__ import annotations

import json

import pytest

from loongsage.training.megatron.mapping import model_spec, padded_vocab_size
from tests.unit.training.megatron.hf_models import hf_config


def test_tiny_llama(tiny_model_path):
    config = json.loads(open(f"{tiny_model_path}/config.json").read())
    spec = model_spec(config)
    assert spec.family == "llama"
    assert spec.transformer["num_layers"] == 2 and spec.transformer["hidden_size"] == 64
    assert spec.transformer["num_attention_heads"] == 4 and spec.transformer["num_query_groups"] == 2
    assert spec.transformer["kv_channels"] == 16
    assert spec.transformer["normalization"] == "RMSNorm" and spec.transformer["gated_linear_unit"]
    assert not spec.transformer["add_bias_linear"] and not spec.transformer["add_qkv_bias"]
    assert not spec.transformer["qk_layernorm"]
    assert spec.gpt["share_embeddings_and_output_weights"] is True
    assert spec.gpt["vocab_size"] == 49152 and spec.gpt["max_sequence_length"] == 2048
    assert spec.transformer["apply_rope_fusion"] is False  # cpu_shims.CPU_OFF is in


def test_qwen2_has_qkv_bias_and_untied_embeddings():
    spec = model_spec(hf_config("qwen2"))
    assert spec.family == "qwen2" and spec.qkv_bias and not spec.qk_norm
    assert spec.tie_word_embeddings is False
    assert spec.gpt["rotary_base"] == 50000.0
    assert spec.transformer["layernorm_epsilon"] == 1e-6


def test_qwen3_has_qk_norm_and_its_own_head_dim():
    spec = model_spec(hf_config("qwen3"))
    assert spec.family == "qwen3" and spec.qk_norm and not spec.qkv_bias
    assert spec.head_dim == 24 != spec.hidden_size // spec.num_attention_heads


def test_a_config_dict_and_a_config_object_give_the_same_spec():
    config = hf_config("qwen3")
    from_object, from_json = model_spec(config), model_spec(json.loads(config.to_json_string()))
    assert (from_object.family, from_object.transformer, from_object.gpt) == (
        from_json.family,
        from_json.transformer,
        from_json.gpt,
    )


def test_older_config_json_rope_fields():
    """config.json files written before transformers 5: rope_theta and rope_scaling with `type`."""
    config = json.loads(hf_config("llama").to_json_string())
    del config["rope_parameters"]
    config |= dict(rope_theta=500000.0, rope_scaling={"type": "linear", "factor": 4.0})
    spec = model_spec(config)
    assert spec.gpt["rotary_base"] == 500000.0 and spec.gpt["seq_len_interpolation_factor"] == 4.0


def test_llama3_rope_scaling_maps_to_megatrons():
    rope = dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0)
    spec = model_spec(
        hf_config("llama", rope_parameters=rope | dict(original_max_position_embeddings=8192), max_position_embeddings=16384)
    )
    assert spec.gpt["rope_scaling"] is True and spec.gpt["rope_scaling_factor"] == 32.0


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (dict(architectures=["MistralForCausalLM"], model_type="mistral"), "architectures=['MistralForCausalLM']"),
        (dict(model_type="gpt2"), "model_type='gpt2'"),
    ],
)
def test_unknown_architecture_is_refused_by_field_listing_the_known_ones(config, named):
    with pytest.raises(ValueError) as error:
        model_spec(config)
    assert named in str(error.value)
    for known in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"):
        assert known in str(error.value)


@pytest.mark.parametrize(
    ("family", "overrides", "field"),
    [
        ("llama", dict(attention_bias=True), "attention_bias"),
        ("llama", dict(mlp_bias=True), "mlp_bias"),
        ("qwen3", dict(attention_bias=True), "attention_bias"),
        ("qwen2", dict(use_sliding_window=True, sliding_window=64, max_window_layers=1), "use_sliding_window"),
        ("llama", dict(hidden_act="gelu"), "hidden_act"),
        ("llama", dict(num_local_experts=8), "num_local_experts"),
        ("qwen3", dict(num_experts=8), "num_experts"),
        ("qwen3_moe", dict(n_routed_experts=8), "n_routed_experts"),
        ("qwen3_moe", dict(q_lora_rank=32), "q_lora_rank"),
        ("qwen3_moe", dict(kv_lora_rank=32), "kv_lora_rank"),
        ("qwen3_moe", dict(router_jitter_noise=0.1), "router_jitter_noise"),
        ("qwen3_moe", dict(num_experts_per_tok=1), "norm_topk_prob=True with num_experts_per_tok=1"),
        ("qwen3_moe", dict(num_experts_per_tok=5), "num_experts_per_tok=5"),
        ("qwen3_moe", dict(attention_bias=True), "attention_bias"),
        ("qwen3_moe", dict(mlp_only_layers=[0, 1]), "no layer has experts"),
        ("qwen3_moe", dict(mlp_only_layers=[7]), "mlp_only_layers"),
        ("qwen2_moe", dict(qkv_bias=False), "qkv_bias"),
        ("qwen2_moe", dict(shared_expert_intermediate_size=0), "shared_expert_intermediate_size"),
        ("qwen2_moe", dict(use_sliding_window=True, sliding_window=64, max_window_layers=1), "use_sliding_window"),
    ],
)
def test_unmapped_settings_are_refused_by_field(family, overrides, field):
    config = json.loads(hf_config(family).to_json_string()) | overrides
    with pytest.raises(ValueError, match=field):
        model_spec(config)


def test_qwen3_moe_maps_its_experts_once():
    spec = model_spec(hf_config("qwen3_moe"))
    t = spec.transformer
    assert spec.family == "qwen3_moe" and spec.qk_norm and not spec.qkv_bias
    assert spec.is_moe and spec.num_experts == t["num_moe_experts"] == 4
    assert spec.router_topk == t["moe_router_topk"] == 2
    assert spec.moe_ffn_hidden_size == 32 and spec.ffn_hidden_size == 96  # dense layer 0 keeps intermediate_size
    assert t["moe_layer_freq"] == [0, 1] and spec.moe_layers == (1,)
    # norm_topk_prob: HF renormalizes the top-k of the full softmax = megatron's softmax after top-k
    assert t["moe_router_score_function"] == "softmax" and t["moe_router_pre_softmax"] is False
    assert t["moe_router_load_balancing_type"] == "aux_loss" and t["moe_aux_loss_coeff"] == 0.01
    assert t["moe_router_dtype"] == "fp32"
    assert spec.shared_expert_size == 0 and "moe_shared_expert_intermediate_size" not in t


def test_qwen2_moe_maps_its_shared_expert_and_gate():
    spec = model_spec(hf_config("qwen2_moe"))
    t = spec.transformer
    assert spec.family == "qwen2_moe" and spec.qkv_bias and not spec.qk_norm
    assert t["moe_layer_freq"] == [1, 1]
    assert t["moe_router_pre_softmax"] is True  # norm_topk_prob false: softmax over every expert, no renormalization
    assert spec.shared_expert_size == t["moe_shared_expert_intermediate_size"] == 48
    assert t["moe_shared_expert_gate"] is True


@pytest.mark.parametrize(
    ("fields", "pattern"),
    [
        (dict(decoder_sparse_step=2, num_hidden_layers=4), [0, 1, 0, 1]),
        (dict(decoder_sparse_step=1, mlp_only_layers=[0, 3], num_hidden_layers=4), [0, 1, 1, 0]),
        (dict(decoder_sparse_step=2, mlp_only_layers=[1], num_hidden_layers=4), [0, 0, 0, 1]),
    ],
)
def test_dense_layers_follow_hfs_rule(fields, pattern):
    """HF: experts in layer i unless i is in mlp_only_layers, when (i + 1) % decoder_sparse_step == 0."""
    config = json.loads(hf_config("qwen3_moe").to_json_string()) | fields
    assert model_spec(config).transformer["moe_layer_freq"] == pattern


def test_the_expert_count_under_either_name():
    """Qwen's config.json says num_experts; transformers 5 writes the same as num_local_experts."""
    config = json.loads(hf_config("qwen3_moe").to_json_string())
    assert "num_local_experts" in config
    for field in ("num_experts", "num_local_experts"):
        named = {k: v for k, v in config.items() if k not in ("num_experts", "num_local_experts")} | {field: 4}
        assert model_spec(named).num_experts == 4
    with pytest.raises(ValueError, match="num_experts=4 and num_local_experts=8 disagree"):
        model_spec(config | dict(num_experts=4, num_local_experts=8))


def test_no_aux_loss_coefficient_maps_to_zero():
    config = json.loads(hf_config("qwen3_moe").to_json_string()) | dict(router_aux_loss_coef=None)
    assert model_spec(config).transformer["moe_aux_loss_coeff"] == 0.0


def test_dense_models_have_no_experts():
    spec = model_spec(hf_config("qwen3"))
    assert not spec.is_moe and spec.num_experts == 0 and spec.moe_layers == () and spec.shared_expert_size == 0


def test_layer_types_other_than_full_attention_are_refused():
    config = json.loads(hf_config("qwen2").to_json_string())
    config["layer_types"] = ["full_attention", "sliding_attention"]
    with pytest.raises(ValueError, match="layer_types"):
        model_spec(config)


@pytest.mark.parametrize(
    ("rope", "field"),
    [
        (dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64), "rope_parameters.rope_type='yarn'"),
        (dict(rope_type="dynamic", factor=2.0), "rope_parameters.rope_type='dynamic'"),
        (
            dict(
                rope_type="llama3", factor=8.0, low_freq_factor=2.0, high_freq_factor=4.0, original_max_position_embeddings=8192
            ),
            "rope_parameters.low_freq_factor",
        ),
        (
            dict(
                rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=4096
            ),
            "rope_parameters.original_max_position_embeddings",
        ),
    ],
)
def test_rope_variants_megatron_cannot_compute_are_refused_by_field(rope, field):
    config = json.loads(hf_config("llama").to_json_string())
    config["rope_parameters"] = rope | dict(rope_theta=10000.0)
    with pytest.raises(ValueError, match=field.replace("(", r"\(").replace(".", r"\.")):
        model_spec(config)


def test_older_rope_scaling_field_is_named_as_written():
    config = json.loads(hf_config("llama").to_json_string())
    del config["rope_parameters"]
    config["rope_scaling"] = {"type": "yarn", "factor": 4.0}
    with pytest.raises(ValueError, match=r"rope_scaling\.rope_type='yarn'"):
        model_spec(config)


def test_missing_required_field_is_named():
    config = json.loads(hf_config("llama").to_json_string())
    del config["intermediate_size"]
    with pytest.raises(ValueError, match="intermediate_size is missing"):
        model_spec(config)


@pytest.mark.parametrize(
    ("vocab", "tp", "padded"),
    [(49152, 1, 49152), (49152, 2, 49152), (1000, 1, 1024), (1000, 4, 1024), (151936, 8, 151936), (1000, 3, 1152)],
)
def test_vocab_padding_is_a_multiple_of_128_and_tp(vocab, tp, padded):
    assert padded_vocab_size(vocab, tp) == padded


def test_aux_loss_coefficient_set_by_the_trainer():
    from loongsage.training.megatron.mapping import with_aux_loss_coeff

    spec = model_spec(hf_config("qwen3_moe"))
    assert with_aux_loss_coeff(spec, None) is spec
    assert with_aux_loss_coeff(spec, 0.0).transformer["moe_aux_loss_coeff"] == 0.0
    assert spec.transformer["moe_aux_loss_coeff"] == 0.01  # the checkpoint's, untouched
