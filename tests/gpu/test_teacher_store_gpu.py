"""teachers.offload=host on a GPU (skipped without CUDA):

    python -m pytest tests/gpu/test_teacher_store_gpu.py -q -s

A TeacherStore on GPU 0 holds two teachers (the tiny model perturbed two ways) in pinned host
memory. The planner routes it to a slot on the same GPU by cuda_ipc[same_device]; each push
stages a bucket at a time on the GPU by DMA (`transfer.channel._staged_on_gpu`) and the slot, an
embedded engine process, reads it there over IPC. The slot then answers exactly as an engine
started on that teacher's files, carries the teacher's name as its weight version, and the
store's GPU memory is back where it was (only buckets in flight were on the device).

Not yet run on a GPU machine.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import save_file

from loongsage.cluster.topology import gather, probe_node
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.teachers.store import STORE, TeacherStore
from loongsage.transfer.planner import plan_routes
from loongsage.transfer.routes import Endpoint
from loongsage.transfer.topology_model import TopologyModel
from tests.integration.inference.embedded.embedded_cli_support import engine_process

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]


def greedy(client: EngineClient) -> tuple[list[int], list[float]]:
    out = client.generate(
        input_ids=PROMPT, sampling_params={"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}, return_logprob=True
    )
    return out["output_ids"], [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]


def teacher_dir(model_path: str, folder, seed: int) -> str:
    shutil.copytree(model_path, folder)
    generator = torch.Generator().manual_seed(seed)
    weights = {n: (t + 0.05 * torch.randn(t.shape, generator=generator)).contiguous() for n, t in read_safetensors(model_path)}
    save_file(weights, str(folder / "model.safetensors"))
    return str(folder)


def test_pinned_teachers_go_into_a_slot_on_the_same_gpu_over_cuda_ipc(tiny_model_path, tmp_path):
    teachers = {f"t{seed}": teacher_dir(tiny_model_path, tmp_path / f"t{seed}", seed) for seed in (1, 2)}
    store = TeacherStore(teachers, gpu=0)
    assert all(tensor.is_pinned() for held in store.weights.values() for _, tensor in held)
    topology = TopologyModel(gather([probe_node(addresses=["127.0.0.1"])]))
    (host,) = topology.hosts()
    with engine_process(tiny_model_path, tmp_path / "slot.log") as slot:
        plan = plan_routes(
            topology, [Endpoint(STORE, "source", host, (0,))], [Endpoint("engine/0", "engine", host, (0,), slot.base_url)]
        )
        (route,) = plan.routes
        assert (route.transport, route.link) == ("cuda_ipc", "same_device"), plan.render()
        store.set_plan(plan.to_dict())
        client = EngineClient(slot.base_url, timeout=120)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated(0)
        for name, folder in teachers.items():
            metrics = store.push(name, slot.base_url)
            assert metrics["transfer/bytes/cuda_ipc"] > 0, metrics
            assert client.get_weight_version() == name
            with engine_process(folder, tmp_path / f"{name}.log") as reference:
                assert greedy(client) == greedy(EngineClient(reference.base_url, timeout=120)), name
        torch.cuda.synchronize()
        torch.cuda.ipc_collect()  # blocks the slot has let go of
        assert torch.cuda.memory_allocated(0) == before  # the staged buckets are gone
        client.close()
