"""The embedded engine serving an MoE model over real HTTP: tokens as transformers samples them
greedily, and R3's `return_routed_experts` in SGLang's encoding, row for row the experts
transformers' router picks for the same tokens, whether the prompt was computed, reused from the
prompt cache or continued from a cached prefix."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from loongsage.models.tiny import tiny_moe_dir
from tests.integration.inference.embedded.engine_support import running_engine

torch.set_num_threads(1)
PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198, 422, 7000]


@pytest.fixture(scope="module")
def moe_path():
    return str(tiny_moe_dir())


@pytest.fixture(scope="module")
def server(moe_path):
    with running_engine(moe_path, return_routed_experts=True) as srv:
        yield srv


@pytest.fixture(scope="module")
def hf_moe(moe_path):
    return AutoModelForCausalLM.from_pretrained(moe_path, dtype=torch.float32).eval()


def _generate(url: str, prompt: list[int], n: int, **fields) -> httpx.Response:
    params = {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}
    return httpx.post(f"{url}/generate", json={"input_ids": prompt, "sampling_params": params, **fields}, timeout=60)


def _decode_experts(meta: dict, layers: int, top_k: int) -> np.ndarray:
    return np.frombuffer(base64.b64decode(meta["routed_experts"]), dtype=np.int32).reshape(-1, layers, top_k)


def _hf_greedy_and_experts(hf, prompt: list[int], n: int) -> tuple[list[int], np.ndarray]:
    """Greedy tokens, then the experts [tokens - 1, layers, k] HF routes prompt + output[:-1] to."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
        picked = []
        hooks = [layer.mlp.gate.register_forward_hook(lambda _m, _a, out: picked.append(out[2])) for layer in hf.model.layers]
        hf(torch.tensor([ids[:-1]]))
        for hook in hooks:
            hook.remove()
    return ids[len(prompt) :], torch.stack(picked, dim=1).numpy()


def test_routed_experts_match_transformers_for_computed_cached_and_continued_prompts(server, hf_moe):
    cfg = server.engine.model.cfg
    expected_tokens, expected = _hf_greedy_and_experts(hf_moe, PROMPT, 6)
    for attempt in ("computed", "prompt cache"):
        reply = _generate(server.base_url, PROMPT, 6, return_routed_experts=True).json()
        assert reply["output_ids"] == expected_tokens, attempt
        experts = _decode_experts(reply["meta_info"], cfg.num_layers, cfg.moe.top_k)
        assert experts.shape == (len(PROMPT) + 6 - 1, cfg.num_layers, cfg.moe.top_k)
        np.testing.assert_array_equal(experts, expected, err_msg=attempt)
    assert reply["meta_info"]["cached_tokens"] == len(PROMPT)

    # A longer prompt opening with the cached one continues its keys/values and its routing.
    longer = PROMPT + [88, 1234, 5]
    expected_tokens, expected = _hf_greedy_and_experts(hf_moe, longer, 3)
    reply = _generate(server.base_url, longer, 3, return_routed_experts=True).json()
    assert reply["meta_info"]["cached_tokens"] == len(PROMPT)
    assert reply["output_ids"] == expected_tokens
    np.testing.assert_array_equal(_decode_experts(reply["meta_info"], cfg.num_layers, cfg.moe.top_k), expected)


def test_routed_experts_only_when_asked(server):
    reply = _generate(server.base_url, PROMPT, 2).json()
    assert "routed_experts" not in reply["meta_info"]


def test_refused_by_name_without_the_flag_or_without_experts(moe_path, tiny_model_path):
    for path, why in ((moe_path, "--enable-return-routed-experts"), (tiny_model_path, "not a mixture-of-experts")):
        with running_engine(path) as srv:
            reply = _generate(srv.base_url, PROMPT, 2, return_routed_experts=True)
            assert reply.status_code == 400
            assert reply.json()["error"]["field"] == "return_routed_experts"
            assert why in reply.json()["error"]["message"]
