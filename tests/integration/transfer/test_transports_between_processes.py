"""Each CPU transport for real between two processes: an embedded engine in a process of its own
takes a push over shm, gloo or inline, and ends with parameters byte for byte those of an engine
that loaded the same weights in this process."""

from __future__ import annotations

import hashlib
import multiprocessing as mp

import pytest
import torch

from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.transfer import push_weights
from tests.integration.inference.embedded.engine_support import running_engine

BUCKET_BYTES = 96 * 1024  # several buckets, so pipelining and the versioned last bucket both happen


def digest(model) -> str:
    sha = hashlib.sha256()
    for name, param in model.named_parameters():
        sha.update(name.encode())
        sha.update(param.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


def _serve_in_child(model_path: str, to_parent, from_parent) -> None:
    with running_engine(model_path) as server:
        to_parent.put(server.base_url)
        from_parent.get()  # the push is done
        to_parent.put(digest(server.engine.model))


@pytest.mark.parametrize("transport", ["shm", "gloo", "inline"])
def test_a_push_reaches_an_engine_in_another_process_byte_for_byte(tiny_model_path, transport):
    generator = torch.Generator().manual_seed(1)
    named = [(n, t + 0.01 * torch.randn(t.shape, generator=generator)) for n, t in read_safetensors(tiny_model_path)]
    context = mp.get_context("spawn")
    to_parent, from_parent = context.Queue(), context.Queue()
    child = context.Process(target=_serve_in_child, args=(tiny_model_path, to_parent, from_parent))
    child.start()
    try:
        url = to_parent.get(timeout=120)
        metrics = push_weights(named, [url], 9, BUCKET_BYTES, transport)
        assert metrics["transfer/buckets"] > 1
        assert EngineClient(url).get_weight_version() == "9"
        from_parent.put("hash")
        theirs = to_parent.get(timeout=60)
    finally:
        from_parent.put("stop")
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    with running_engine(tiny_model_path) as here:
        before = digest(here.engine.model)
        push_weights(named, [here.base_url], 9, 1 << 30, "inline")  # one bucket, in this process
        assert digest(here.engine.model) == theirs != before
