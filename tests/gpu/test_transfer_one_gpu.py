"""TransferMesh's cuda_ipc route for real, on a machine with one GPU (skipped without CUDA):

    python -m pytest tests/gpu/test_transfer_one_gpu.py -q -s

The probe of this machine finds its GPU, and the planner routes a source on GPU 0 to an engine
on the same GPU by cuda_ipc[same_device]. The push sends CUDA IPC handles of the source's GPU
buckets (SGLang's payload, the device named by UUID) to an embedded engine running as a process
of its own, which opens them and copies its weights out; one update round commits it. The engine
then samples exactly as it does once the same weights come over inline, and the source's GPU
memory is back where it was. (nccl and GPU relays need two GPUs: test_transfer_mesh_gpu.py.)
Run on one H200 on 2026-12-04: all three pass (the tiny model, 12.9 MB in 2 buckets, 0.23 s).
"""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from loongsage.cluster.topology import gather, probe_node
from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.transfer import push_weights
from loongsage.transfer.endpoints import SOURCE, source_name
from loongsage.transfer.planner import plan_routes
from loongsage.transfer.rounds import execute_plan, run_update_round
from loongsage.transfer.routes import Endpoint, Plan, Route
from loongsage.transfer.source_routes import send_routes
from loongsage.transfer.topology_model import TopologyModel
from tests.integration.inference.embedded.embedded_cli_support import engine_process

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]


def greedy(client: EngineClient) -> tuple[list[int], list[float]]:
    out = client.generate(
        input_ids=PROMPT, sampling_params={"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}, return_logprob=True
    )
    return out["output_ids"], [lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]


def perturbed(model_path: str, seed: int) -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(n, t + 0.05 * torch.randn(t.shape, generator=generator)) for n, t in read_safetensors(model_path)]


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
    on_cpu = perturbed(tiny_model_path, 5)
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
        assert report.failed == {} and report.updated == [proc.base_url], (report, proc.log()[-3000:])
        metrics = report.metrics
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


def _second_source(plan: dict, url: str, on_cpu, skip: list[str], answers) -> None:
    """trainer/1 in a process of its own, its replica on the same GPU, as a second trainer rank."""
    torch.cuda.set_device(0)
    on_gpu = [(n, t.to("cuda:0")) for n, t in on_cpu]
    answers.put(send_routes(Plan.from_dict(plan), source_name(1), on_gpu, [url], "127.0.0.1", 1, skip=skip))


def test_two_sources_on_the_gpu_each_send_a_share_into_one_engine(tiny_model_path, tmp_path):
    """The update round as TrainGroup runs it, with two source processes holding GPU replicas: each
    sends one share of the buckets by cuda_ipc, the engine is committed once both are done."""
    torch.cuda.set_device(0)
    on_cpu = perturbed(tiny_model_path, 7)
    on_gpu = [(n, t.to("cuda:0")) for n, t in on_cpu]
    context = mp.get_context("spawn")
    answers = context.Queue()
    with engine_process(tiny_model_path, tmp_path / "engine.log") as proc:
        url = proc.base_url
        sources = [Endpoint(source_name(rank), "source", "gpu-host", (0,)) for rank in (0, 1)]
        engine = Endpoint("engine/0", "engine", "gpu-host", (0,), url)
        routes = [Route(s.name, engine.name, "cuda_ipc", "same_device", share, 2) for share, s in enumerate(sources)]
        plan = Plan({e.name: e for e in (*sources, engine)}, routes)
        plan.check()

        def send(skip: list[str]) -> list:
            second = context.Process(target=_second_source, args=(plan.to_dict(), url, on_cpu, skip, answers))
            second.start()
            mine = send_routes(plan, source_name(0), on_gpu, [url], "127.0.0.1", 1, skip=skip)
            theirs = answers.get(timeout=180)
            second.join(timeout=60)
            return [mine, theirs]

        report = run_update_round(plan, [url], 7, send)
        assert report.failed == {} and report.updated == [url], (report, proc.log()[-3000:])
        whole = sum(t.numel() * t.element_size() for _, t in on_cpu)
        assert report.metrics["transfer/bytes/cuda_ipc"] == whole  # each bucket once, from one of the two
        client = EngineClient(url, timeout=120)
        assert client.get_weight_version() == "7"
        shared = greedy(client)
        push_weights(on_cpu, [url], 8, 1 << 30, "inline")
        assert greedy(client) == shared
