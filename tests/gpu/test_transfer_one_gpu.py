"""TransferMesh's cuda_ipc route for real, on a machine with one GPU (skipped without CUDA):

    python -m pytest tests/gpu/test_transfer_one_gpu.py -q -s

The probe of this machine finds its GPU, and the planner routes a source on GPU 0 to an engine
on the same GPU by cuda_ipc[same_device]. The push sends CUDA IPC handles of the source's GPU
buckets (SGLang's payload, the device named by UUID) to an embedded engine running as a process
of its own, which opens them and copies its weights out; one update round commits it. The engine
then samples exactly as it does once the same weights come over inline, and the source's GPU
memory is back where it was. (nccl and GPU relays need two GPUs: test_transfer_mesh_gpu.py.)
"""

from __future__ import annotations

import pytest
import torch

from loongsage.cluster.topology import gather, probe_node
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.transfer import push_weights
from loongsage.transfer.mesh import SOURCE, execute_plan
from loongsage.transfer.planner import plan_routes
from loongsage.transfer.routes import Endpoint
from loongsage.transfer.topology_model import TopologyModel
from tests.integration.embedded_cli_support import engine_process

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]


def greedy(client: EngineClient) -> tuple[list[int], list[float]]:
    out = client.generate(
        input_ids=PROMPT, sampling_params={"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}, return_logprob=True
    )
    return out["output_ids"], [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]


def test_the_probe_sees_the_gpu_and_the_plan_routes_a_colocated_engine_over_cuda_ipc():
    topology = TopologyModel(gather([probe_node(addresses=["127.0.0.1"])]))
    (host,) = topology.hosts()
    assert topology.node(host).gpus, "the probe found no GPU on a machine where torch sees one"
    source = Endpoint(SOURCE, "source", host, (0,))
    engine = Endpoint("engine/0", "engine", host, (0,), "http://127.0.0.1:1")
    plan = plan_routes(topology, [source], [engine])
    print(plan.render())
    (route,) = plan.routes
    assert (route.sender, route.transport, route.link) == (SOURCE, "cuda_ipc", "same_device")


def test_cuda_ipc_from_gpu_buckets_into_an_engine_process(tiny_model_path, tmp_path):
    torch.cuda.set_device(0)
    generator = torch.Generator().manual_seed(5)
    on_cpu = [(n, t + 0.05 * torch.randn(t.shape, generator=generator)) for n, t in read_safetensors(tiny_model_path)]
    on_gpu = [(n, t.to("cuda:0")) for n, t in on_cpu]
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    with engine_process(tiny_model_path, tmp_path / "engine.log") as proc:
        client = EngineClient(proc.base_url, timeout=120)
        before = greedy(client)
        topology = TopologyModel(gather([probe_node(addresses=["127.0.0.1"])]))
        (host,) = topology.hosts()
        plan = plan_routes(
            topology, [Endpoint(SOURCE, "source", host, (0,))], [Endpoint("engine/0", "engine", host, (0,), proc.base_url)]
        )
        report = execute_plan(plan, SOURCE, on_gpu, [proc.base_url], 5, "127.0.0.1", bucket_mb=1)
        assert report["failed"] == {} and report["updated"] == [proc.base_url], (report, proc.log()[-3000:])
        metrics = report["metrics"]
        assert metrics["transfer/buckets"] > 1 and metrics["transfer/bytes/cuda_ipc"] == sum(
            t.numel() * t.element_size() for _, t in on_cpu
        )
        assert client.get_weight_version() == "5"
        over_ipc = greedy(client)
        assert over_ipc != before
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == held  # every bucket's GPU copy was released

        push_weights(on_cpu, [proc.base_url], 6, 1 << 30, "inline")
        assert client.get_weight_version() == "6"
        assert greedy(client) == over_ipc  # the same weights, byte for byte
        print(f"cuda_ipc push: {metrics['transfer/buckets']:.0f} buckets, {metrics['transfer/seconds']:.3f} s")
