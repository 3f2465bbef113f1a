"""trainer.weight_sync=cuda_ipc from this process into the embedded engine running as a
process of its own (`python -m loongsage.inference.embedded`): SGLang's pickled payload, CPU
tensors in torch's file_system shared memory that the unrelated engine process maps."""

from __future__ import annotations

import base64
import os
import pickle
import shutil
import time

import httpx
import pytest
import torch
from safetensors.torch import save_file

from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.transfer import push_weights
from loongsage.transfer.ipc_bucket import shared_bucket
from loongsage.transfer.session import update_sessions
from tests.integration.inference.embedded.embedded_cli_support import engine_process

PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]


def own_segments() -> list[str]:
    """torch file_system segments this process created (other processes' are not ours to judge)."""
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(f"torch_{os.getpid()}_"))


@pytest.fixture(scope="module")
def engine_proc(tiny_model_path, tmp_path_factory):
    with engine_process(tiny_model_path, tmp_path_factory.mktemp("engine") / "engine.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def engine(engine_proc):
    client = EngineClient(engine_proc.base_url, timeout=120)
    yield client
    client.close()


def mapped_segments(pid: int) -> set[str]:
    """Which of our segments process `pid` still maps (unlinked ones too)."""
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split()[-2] for line in maps if f"/torch_{os.getpid()}_" in line}


@pytest.fixture(scope="module")
def new_weights(tiny_model_path, tmp_path_factory):
    """Every tensor of the tiny model perturbed, and the same weights saved as a checkpoint."""
    gen = torch.Generator().manual_seed(3)
    named = [(n, t + 0.05 * torch.randn(t.shape, generator=gen)) for n, t in read_safetensors(tiny_model_path)]
    copy = tmp_path_factory.mktemp("perturbed") / "model"
    shutil.copytree(tiny_model_path, copy)
    save_file({n: t.contiguous() for n, t in named}, str(copy / "model.safetensors"))
    return named, str(copy)


def greedy(client: EngineClient) -> tuple[list[int], list[float], str]:
    out = client.generate(
        input_ids=PROMPT, sampling_params={"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}, return_logprob=True
    )
    logprobs = [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]
    return out["output_ids"], logprobs, out["meta_info"]["weight_version"]


def test_a_push_sets_exactly_the_pushed_weights_and_frees_its_shared_memory(engine, engine_proc, new_weights, tiny_model_path):
    named, checkpoint = new_weights
    assert own_segments() == []
    before = greedy(engine)
    stats = push_weights(iter(named), [engine.base_url], version=3, bucket_bytes=64 * 1024, transport="cuda_ipc")
    assert own_segments() == []
    assert stats["transfer/buckets"] > 1  # several buckets, several segments: each one released
    assert stats["transfer/bytes"] == sum(t.numel() * t.element_size() for _, t in named)
    # The engine copied each bucket into its parameters and let go of the mapping.
    deadline = time.monotonic() + 10
    while mapped_segments(engine_proc.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mapped_segments(engine_proc.proc.pid) == set()
    pushed = greedy(engine)
    assert pushed[2] == "3"
    assert pushed[:2] != before[:2]
    # The same weights from disk: identical tokens and logprobs, so the push changed exactly them.
    engine.update_weights_from_disk(checkpoint, weight_version="disk")
    from_disk = greedy(engine)
    assert from_disk[:2] == pushed[:2] and from_disk[2] == "disk"
    engine.update_weights_from_disk(tiny_model_path, weight_version="0")
    assert greedy(engine)[:2] == before[:2]


class _System:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def post_update(client: EngineClient, entries: list, **fields) -> httpx.Response:
    body = {"serialized_named_tensors": entries, "load_format": None, "weight_version": "never", **fields}
    return httpx.post(client.base_url + "/update_weights_from_tensor", json=body, timeout=60)


def test_a_pickle_naming_os_system_is_refused_without_running(engine, tmp_path):
    marker = tmp_path / "ran"
    payload = base64.b64encode(pickle.dumps([("model.norm.weight", _System(f"touch {marker}"))])).decode()
    before = greedy(engine)
    with update_sessions([engine]):
        answer = post_update(engine, [payload])
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["field"] == "serialized_named_tensors"
    assert "system is not allowed in a tensor payload" in error["message"]
    assert not marker.exists()
    assert greedy(engine) == before  # weights and version untouched


@pytest.mark.parametrize("ranks", [0, 2])
def test_a_list_longer_or_shorter_than_the_tp_size_is_refused(engine, ranks):
    before = greedy(engine)
    with shared_bucket([("model.norm.weight", torch.zeros(64))]) as shared:
        with update_sessions([engine]):
            answer = post_update(engine, [shared.serialize() for _ in range(ranks)])
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["field"] == "serialized_named_tensors"
    assert "one entry" in answer.json()["error"]["message"]
    assert greedy(engine) == before
    assert own_segments() == []  # the dumps the engine never read were taken back
