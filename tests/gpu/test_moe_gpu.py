"""Mixtures of experts on a GPU machine: the megatron backend's experts with TransformerEngine's
grouped GEMM (where it is installed) against transformers, expert parallelism over NCCL, and
SGLang's `return_routed_experts` replayed by the trainer. Skipped without CUDA (the SGLang test
also without an importable sglang); on a lent device run

    python -m pytest tests/gpu/test_moe_gpu.py -q -s

The CPU suite runs the same checks over gloo with local experts
(tests/integration/training/megatron/test_megatron_moe_trainer.py, tests/unit/training/megatron/test_model.py,
tests/integration/inference/embedded/test_engine_moe.py); these add bf16, grouped GEMM, NCCL
and a real SGLang. The model: a random Qwen3-MoE-shaped model (8 experts, top-2, qk-norm,
4 layers), made in a temporary directory.

Not yet run on a GPU machine (no device was lent to the sessions that wrote it).
"""

from __future__ import annotations

import base64
import sys
import time
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch

from loongsage.config.schema import AlgorithmConfig
from loongsage.models.tiny import build_tiny
from tests.gpu.test_megatron_gpu import logits_vs_hf
from tests.integration.training.megatron.megatron_workers import run_ranks
from tests.integration.training.megatron.test_megatron_moe_trainer import moe_trainer, one_step
from tests.integration.training.megatron.test_megatron_trainer import ALGO, METRICS_COMPARED

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

QWEN3_MOE_SHAPE = dict(
    hidden_size=256,
    head_dim=32,
    num_attention_heads=8,
    num_key_value_heads=4,
    num_hidden_layers=4,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
)


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory) -> str:
    return str(build_tiny(tmp_path_factory.mktemp("qwen3-moe"), "Qwen3MoeForCausalLM", **QWEN3_MOE_SHAPE))


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-4), ("bfloat16", 0.1)])
def test_grouped_experts_logits_match_hf(dtype, tolerance, moe_dir, tmp_path):
    result = run_ranks(moe_dir, moe_trainer(dtype=dtype), partial(logits_vs_hf, moe_dir), tmp_path, ALGO)[0]
    print(f"{dtype}: max logit gap {result['logits']:.3g}, transformer_engine={result['transformer_engine']}")
    assert result["logits"] <= tolerance


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="ep=2 needs two GPUs")
def test_expert_parallel_step_over_nccl_is_the_single_rank_step(moe_dir, tmp_path):
    single = run_ranks(moe_dir, moe_trainer(), one_step, tmp_path / "ep1", ALGO)[0]
    ranks = run_ranks(moe_dir, moe_trainer(ep=2, dp=2), one_step, tmp_path / "ep2", ALGO)
    for key in METRICS_COMPARED:
        assert ranks[0]["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-4, abs=1e-6), key


def _sglang_importable() -> bool:
    try:
        import sglang  # noqa: F401
    except Exception:
        return False
    return True


def _engine_samples(url: str, layers: int, top_k: int) -> list:
    """Samples as the rollout makes them from SGLang: sampled tokens, their logprobs and the routing."""
    from loongsage.inference.client import EngineClient
    from loongsage.sample import Sample

    client = EngineClient(url, timeout=300)
    samples = []
    try:
        for seed in range(8):
            prompt = [1 + (seed * 37 + i * 11) % 1000 for i in range(12)]
            params = {"temperature": 1.0, "max_new_tokens": 24, "ignore_eos": True, "sampling_seed": seed}
            reply = client.generate(input_ids=prompt, sampling_params=params, return_logprob=True, return_routed_experts=True)
            meta = reply["meta_info"]
            routed = np.frombuffer(base64.b64decode(meta["routed_experts"]), dtype=np.int32)
            rows = len(prompt) + len(reply["output_ids"]) - 1
            assert routed.size == rows * layers * top_k, "SGLang's routed_experts: [seqlen - 1, layers, top_k]"
            samples.append(
                Sample(
                    prompt_ids=prompt,
                    response_ids=reply["output_ids"],
                    response_logprobs=[entry[0] for entry in meta["output_token_logprobs"]],
                    loss_mask=[1] * len(reply["output_ids"]),
                    routed_experts=routed.reshape(rows, layers * top_k),
                    advantage=1.0,
                )
            )
    finally:
        client.close()
    return samples


def _first_step(samples, worker) -> dict:
    return worker.train_step(samples)


@pytest.mark.skipif(not _sglang_importable(), reason="needs sglang (pip install '.[gpu]')")
def test_sglang_routed_experts_replayed_by_the_trainer(moe_dir, tmp_path):
    """SGLang (bf16) routes some tokens otherwise than the fp32 trainer; replaying its routing
    brings the trainer's log-probs closer to the engine's."""
    import ray

    from loongsage.inference.sglang.actor import SglangEngineActor

    cfg = {
        "max_running": 8,
        "max_context": 512,
        "dtype": "bfloat16",
        "weight_version": "0",
        "seed": 0,
        "return_routed_experts": True,
        "sglang": {
            "command": [sys.executable, "-m", "sglang.launch_server"],
            "mem_fraction_static": 0.3,
            "extra_args": ["--log-level", "warning", "--disable-cuda-graph"],
            "index": 0,
            "tp": 1,
            "gpus": [0],
            "log_dir": str(tmp_path / "sglang"),
        },
    }
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        actor = SglangEngineActor.remote(moe_dir, cfg)
        started = time.monotonic()
        url = ray.get(actor.start.remote())
        print(f"\nsglang up in {time.monotonic() - started:.0f} s")
        try:
            samples = _engine_samples(url, QWEN3_MOE_SHAPE["num_hidden_layers"], QWEN3_MOE_SHAPE["num_experts_per_tok"])
        finally:
            ray.get(actor.stop.remote())
    finally:
        ray.shutdown()
    results = {}
    for replay in (False, True):
        algo = replace(AlgorithmConfig(), routing_replay=replay)
        results[replay] = run_ranks(moe_dir, moe_trainer(), partial(_first_step, samples), tmp_path / str(replay), algo)[0]
    print({replay: {k: v for k, v in m.items() if "mismatch" in k} for replay, m in results.items()})
    assert results[False]["train/routing_mismatch"] > 0
    assert results[True]["train/mismatch_k3_kl"] < results[False]["train/mismatch_k3_kl"]
