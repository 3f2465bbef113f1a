"""The GEMM bound `bench engine` sets the embedded engine against: the model's own weight
matmuls, the decode schedule of a fixed-length workload, and the padded widths it may use."""

from __future__ import annotations

import pytest
import torch

from loongsage.bench.roofline import GemmBound, decode_steps_by_rows, distinct_prompt_tokens, weight_matmuls
from loongsage.inference.embedded.llama import ModelConfig
from loongsage.inference.embedded.weights import load_model
from loongsage.models import resolve_model_path


def test_the_matmuls_are_every_projection_weight_of_the_model_and_its_lm_head(tiny_model_path):
    cfg = ModelConfig.from_dir(tiny_model_path)
    model = load_model(tiny_model_path, torch.float32)
    projections = [
        p.numel()
        for name, p in model.named_parameters(remove_duplicate=False)
        if name.endswith("_proj.weight") or name == "lm_head.weight"
    ]
    shapes = weight_matmuls(cfg)
    assert len(shapes) == 5 * cfg.num_layers + 1  # q/k/v are one matmul (fused, as the engine runs them)
    assert sum(out * inp for out, inp in shapes) == sum(projections)
    assert shapes[-1] == (cfg.vocab_size, cfg.hidden_size)


def test_a_mixture_of_experts_model_is_refused_by_name():
    with pytest.raises(ValueError, match="dense models; Qwen3MoeForCausalLM routes tokens to experts"):
        weight_matmuls(ModelConfig.from_dir(resolve_model_path("tiny-moe")))


def test_decode_steps_run_the_requests_still_short_of_their_length():
    # The first token of each request comes with its prefill: 1 token needs no decode step.
    steps = decode_steps_by_rows([1, 3, 3, 5])
    assert steps == {3: 2, 1: 2}
    assert sum(rows * count for rows, count in steps.items()) == (1 + 3 + 3 + 5) - 4


def test_each_decode_step_is_timed_at_the_fastest_width_that_holds_its_rows(tiny_model_path):
    bound = GemmBound(ModelConfig.from_dir(tiny_model_path), repeats=1)
    bound._seconds = {1: 1.0, 2: 0.5, 3: 2.0, 4: 0.8}  # as measured on a machine whose 3-row kernel is slow
    decode = bound.decode({3: 1, 1: 2}, widths=[1, 2, 3, 4])
    assert decode.seconds == pytest.approx(0.8 + 2 * 0.5)
    assert decode.rows == 5
    assert decode.flops == pytest.approx(bound.flops(5))


def test_measured_passes_take_longer_for_more_rows(tiny_model_path):
    bound = GemmBound(ModelConfig.from_dir(tiny_model_path), repeats=3)
    assert bound.prefill(2048).seconds > bound.forward_seconds(1) > 0


def test_a_prefill_computes_the_prompts_common_prefix_once():
    assert distinct_prompt_tokens([[1, 2, 3, 4], [1, 2, 5], [1, 2]]) == 2 + 2 + 1 + 0
    assert distinct_prompt_tokens([[7, 1], [8, 1]]) == 4
