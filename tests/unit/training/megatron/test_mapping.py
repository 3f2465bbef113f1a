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
    for known in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"):
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
    ],
)
def test_unmapped_settings_are_refused_by_field(family, overrides, field):
    config = json.loads(hf_config(family).to_json_string()) | overrides
    with pytest.raises(ValueError, match=field):
        model_spec(config)


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
