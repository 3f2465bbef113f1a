"""Releasing and resuming the embedded engine's memory (SGLang's /release_memory_occupation and
/resume_memory_occupation), over real HTTP: refusals while released or not reloaded, the same
output after a reload, and resident memory that really falls and comes back."""

from __future__ import annotations

import re
import threading

import httpx
import pytest
import torch

from loongsage.inference.client import EngineClient, EngineError
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.transfer.session import update_sessions
from loongsage.transfer.transports import pack_inline
from tests.integration.inference.embedded.embedded_cli_support import engine_process
from tests.integration.inference.embedded.engine_support import WAIT_S, running_engine, wait_until_queued

torch.set_num_threads(1)
PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]
ALL_TAGS = ["cuda_graph", "kv_cache", "weights"]


@pytest.fixture(scope="module")
def server(tiny_model_path):
    with running_engine(tiny_model_path, max_context=256) as srv:
        yield srv


@pytest.fixture
def client(server, tiny_model_path):
    """Every test leaves the engine resumed and loaded with the tiny model's own weights."""
    c = EngineClient(server.base_url, timeout=WAIT_S)
    yield c
    c.continue_generation()
    c.resume_memory_occupation(None)
    c.update_weights_from_disk(tiny_model_path)
    c.close()


def _scored(client: EngineClient, prompt=PROMPT) -> tuple:
    """Greedy tokens with their logprobs and the prompt's: everything the weights decide."""
    out = client.generate(
        input_ids=prompt,
        sampling_params={"temperature": 0, "max_new_tokens": 6, "ignore_eos": True},
        return_logprob=True,
        logprob_start_len=0,
    )
    meta = out["meta_info"]
    return out["output_ids"], meta["output_token_logprobs"], meta["input_token_logprobs"]


def _refused(client: EngineClient, status: int, pattern: str) -> EngineError:
    with pytest.raises(EngineError, match=pattern) as refused:
        _scored(client)
    assert refused.value.status == status
    return refused.value


def test_resume_then_full_reload_gives_the_same_tokens_and_logprobs(client, tiny_model_path):
    before = _scored(client)
    checkpoint = read_safetensors(tiny_model_path)

    client.release_memory_occupation(None)
    assert client.release_memory_occupation(None)["memory_released"] == ALL_TAGS  # idempotent
    info = client.get_server_info()
    assert (info["memory_released"], info["kv_cache_capacity"], info["prompt_cache_entries"]) == (ALL_TAGS, 0, 0)
    _refused(client, 503, "weights released")
    assert not client.health_generate()
    with pytest.raises(EngineError, match="weights released") as refused:
        client.update_weights_from_disk(tiny_model_path)
    assert refused.value.status == 503

    client.resume_memory_occupation(None)
    client.resume_memory_occupation(None)
    n = len(checkpoint)  # the checkpoint names every parameter once (tied lm_head included in embed)
    assert client.get_server_info()["weights_not_loaded"] == n
    error = _refused(client, 503, rf"{n} of {n} parameters not loaded")
    named = re.search(r"e\.g\. (\S+)\)", error.server_message).group(1)
    assert named in dict(checkpoint)

    with update_sessions([client]), pack_inline([(named, dict(checkpoint)[named])]) as payload:
        client.update_weights_from_tensor([payload], load_format="inline")  # staged: not written yet
        assert client.get_server_info()["weights_not_loaded"] == n
        client.update_weights_from_tensor([payload], load_format="inline", weight_version="one")  # committed
    error = _refused(client, 503, rf"{n - 1} of {n} parameters not loaded")  # one fewer missing
    assert named not in error.server_message

    client.update_weights_from_disk(tiny_model_path, weight_version="reloaded")
    assert client.get_server_info()["weights_not_loaded"] == 0
    assert _scored(client) == before
    assert client.get_weight_version() == "reloaded"


def test_only_the_kv_cache_released_needs_no_reload(client, server):
    before = _scored(client)
    assert server.engine.scheduler.cache.capacity > 0 and len(server.engine.scheduler.prompts) > 0
    client.release_memory_occupation(["kv_cache"])
    info = client.get_server_info()
    assert (info["memory_released"], info["kv_cache_capacity"], info["prompt_cache_entries"]) == (["kv_cache"], 0, 0)
    _refused(client, 503, "kv_cache released")
    client.resume_memory_occupation(["kv_cache"])
    assert client.get_server_info()["weights_not_loaded"] == 0
    assert _scored(client) == before


def test_cuda_graph_is_accepted_and_changes_nothing_on_cpu(client):
    before = _scored(client)
    assert client.release_memory_occupation(["cuda_graph"])["memory_released"] == ["cuda_graph"]
    assert _scored(client) == before
    assert client.resume_memory_occupation(["cuda_graph"])["memory_released"] == []


@pytest.mark.parametrize("body", [{"tags": ["weights", "gpu_buffers"]}, {"tags": "weights"}, {"tags": [1]}, [1]])
def test_bad_tags_are_refused_naming_the_field(client, server, body):
    for path in ("/release_memory_occupation", "/resume_memory_occupation"):
        response = httpx.post(server.base_url + path, json=body, timeout=WAIT_S)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["field"] in ("tags", "body")
    assert client.get_server_info()["memory_released"] == []


def test_an_empty_body_means_every_tag(client, server):
    assert httpx.post(server.base_url + "/release_memory_occupation", content=b"", timeout=WAIT_S).status_code == 200
    assert client.get_server_info()["memory_released"] == ALL_TAGS
    assert httpx.post(server.base_url + "/resume_memory_occupation", content=b"", timeout=WAIT_S).status_code == 200
    assert client.get_server_info()["memory_released"] == []


def test_release_is_refused_while_a_paused_request_is_in_flight(client, server):
    before = _scored(client, PROMPT[:5])
    client.pause_generation(mode="in_place")
    result: dict = {}
    worker = threading.Thread(target=lambda: result.setdefault("out", _scored(client, PROMPT[:5])))
    worker.start()
    wait_until_queued(server, 1)
    with pytest.raises(EngineError, match=r"1 request\(s\) in flight") as refused:
        client.release_memory_occupation(["weights"])
    assert refused.value.status == 400
    assert client.get_server_info()["memory_released"] == []
    client.continue_generation()
    worker.join(WAIT_S)
    assert result["out"] == before  # the request finished on the weights it started with


# ---- resident memory, measured on the engine process the actor would start ---------------


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_resident_memory_falls_by_the_weights_and_comes_back(llama_dir, tmp_path):
    path, weight_bytes = llama_dir
    assert weight_bytes > 100 * 2**20
    with engine_process(path, tmp_path / "engine.log", "--context-length", "128", "--enable-memory-saver") as engine:
        client = EngineClient(engine.base_url, timeout=WAIT_S)
        try:
            before = _scored(client, [1, 5, 9, 200, 7])
            # The same path once without weights: its first-use allocations (a threadpool thread,
            # imports) are not what is measured.
            client.release_memory_occupation(["cuda_graph"])
            client.resume_memory_occupation(["cuda_graph"])
            loaded = _rss_bytes(engine.proc.pid)
            client.release_memory_occupation(["weights"])
            released = _rss_bytes(engine.proc.pid)
            client.resume_memory_occupation(["weights"])
            resumed = _rss_bytes(engine.proc.pid)
            client.update_weights_from_disk(path)
            after = _scored(client, [1, 5, 9, 200, 7])
        finally:
            client.close()
    mb = 2**20
    report = (
        f"weights {weight_bytes} B ({weight_bytes / mb:.1f} MB); RSS loaded {loaded / mb:.1f}, released {released / mb:.1f}, "
        f"resumed {resumed / mb:.1f} MB; fell by {loaded - released} B, rose by {resumed - released} B"
    )
    print(report)
    assert loaded - released >= weight_bytes, report
    assert resumed - released >= 0.95 * weight_bytes, report  # the resumed storages are resident again
    assert after == before


def test_pushes_stage_into_the_spares_and_a_release_of_the_weights_drops_them(client, server, tiny_model_path):
    """After a push the engine keeps the storages it replaced (staging.py's spares) and the next
    push writes into them, allocating nothing; giving the weights back gives the spares back too."""
    from loongsage.transfer import push_weights

    checkpoint = read_safetensors(tiny_model_path)
    weight_bytes = sum(
        {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in server.engine.model.parameters()}.values()
    )
    for version, delta in ((1, 0.5), (2, 0.25)):
        push_weights([(name, t + delta) for name, t in checkpoint], [server.base_url], version, transport="shm")
        info = client.get_server_info()
        assert info["weight_spare_bytes"] == weight_bytes and client.get_weight_version() == str(version)
        if version == 1:
            allocations = info["weight_staging_allocations"]
    assert info["weight_staging_allocations"] == allocations  # the second push: into the spares
    live = dict(server.engine.model.named_parameters())
    assert all(torch.equal(live[name], t + 0.25) for name, t in checkpoint)
    client.release_memory_occupation(["weights"])
    assert client.get_server_info()["weight_spare_bytes"] == 0
