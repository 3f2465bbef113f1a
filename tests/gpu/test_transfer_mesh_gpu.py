"""TransferMesh's GPU routes for real, on a lent machine with two GPUs (skipped otherwise):

    python -m pytest tests/gpu/test_transfer_mesh_gpu.py -q -s

The source (this process, GPU 0) broadcasts over nccl to a relay that holds its buckets on GPU 1
(a process of its own, as a relay actor on a GPU host is), which forwards them by cuda_ipc to an
embedded engine (CPU weights: it opens the CUDA IPC handles and copies out); one update round
commits the engine. Its parameters must end byte for byte those of an engine given the same
weights over inline. Not yet run: the one GPU machine lent so far had one GPU (NCCL refuses two
ranks on one device); test_transfer_one_gpu.py runs the cuda_ipc half there.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp

import pytest
import torch

from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.transfer import push_weights
from loongsage.transfer.endpoints import SOURCE
from loongsage.transfer.rounds import execute_plan
from loongsage.transfer.routes import Endpoint, Plan, Route
from tests.integration.inference.embedded.engine_support import running_engine

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def digest(model) -> str:
    sha = hashlib.sha256()
    for name, param in model.named_parameters():
        sha.update(name.encode())
        sha.update(param.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


def _relay_on_gpu1(engine_url: str, to_parent, from_parent) -> None:
    from loongsage.transfer.relay import RelayActor

    relay = RelayActor({"cuda_ipc": [engine_url]}, "127.0.0.1", gpu=1)
    to_parent.put(relay.start())
    from_parent.get()
    relay.stop()


def test_nccl_into_a_gpu_relay_then_cuda_ipc_into_the_engine(tiny_model_path):
    torch.cuda.set_device(0)
    generator = torch.Generator().manual_seed(2)
    named = [(n, t + 0.01 * torch.randn(t.shape, generator=generator)) for n, t in read_safetensors(tiny_model_path)]
    context = mp.get_context("spawn")
    to_parent, from_parent = context.Queue(), context.Queue()
    with running_engine(tiny_model_path) as engine:
        relay_process = context.Process(target=_relay_on_gpu1, args=(engine.base_url, to_parent, from_parent))
        relay_process.start()
        try:
            relay_url = to_parent.get(timeout=120)
            endpoints = [
                Endpoint(SOURCE, "source", "trainer-host", (0,)),
                Endpoint("relay/engine-host/0", "relay", "engine-host", (1,), relay_url),
                Endpoint("engine/0", "engine", "engine-host", (), engine.base_url),
            ]
            routes = [
                Route(SOURCE, "relay/engine-host/0", "nccl", "rdma"),
                Route("relay/engine-host/0", "engine/0", "cuda_ipc", "nvlink"),
            ]
            plan = Plan({e.name: e for e in endpoints}, routes)
            plan.check()
            report = execute_plan(plan, SOURCE, named, [engine.base_url], 3, "127.0.0.1", bucket_mb=1)
            assert report.failed == {} and report.updated == [engine.base_url], report
            assert EngineClient(engine.base_url).get_weight_version() == "3"
            theirs = digest(engine.engine.model)
        finally:
            from_parent.put("stop")
            relay_process.join(timeout=60)
    with running_engine(tiny_model_path) as reference:
        push_weights(named, [reference.base_url], 3, 1 << 30, "inline")
        assert digest(reference.engine.model) == theirs
