"""The embedded engine switches weight versions atomically, over real HTTP (issue 15, item 5).

Inside a weight-update session, tensor and distributed updates are staged; the bucket that
carries `weight_version` (a push's last) commits them all with the version in one step; a
session that ends without that bucket leaves every parameter bit-identical and the version as
it was. Outputs are compared with fresh engines of the old and of the new weights.
"""

from __future__ import annotations

import logging
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch
from safetensors.torch import save_file

from loongsage.inference.client import EngineClient, EngineError
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.inference.sglang.ports import free_ports
from loongsage.inference.weight_wire.process_group import WeightUpdateGroup
from loongsage.transfer.transports import pack_inline
from tests.integration.inference.embedded.engine_support import WAIT_S, running_engine

torch.set_num_threads(1)
PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]
BUCKETS = 4


@pytest.fixture(scope="module")
def old_weights(tiny_model_path) -> list[tuple[str, torch.Tensor]]:
    return read_safetensors(tiny_model_path)


@pytest.fixture(scope="module")
def new_weights(old_weights) -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(15)
    return [(name, t + 0.02 * torch.randn(t.shape, generator=gen)) for name, t in old_weights]


@pytest.fixture(scope="module")
def reference(tiny_model_path, new_weights, tmp_path_factory) -> dict:
    """What fresh engines of the old and of the new weights answer."""
    new_dir = tmp_path_factory.mktemp("new") / "model"
    shutil.copytree(tiny_model_path, new_dir)
    for old_file in new_dir.glob("*.safetensors"):
        old_file.unlink()
    save_file({name: t.contiguous() for name, t in new_weights}, str(new_dir / "model.safetensors"))
    answers = {}
    for key, path in (("old", tiny_model_path), ("new", str(new_dir))):
        with running_engine(path) as server:
            answers[key] = scored(EngineClient(server.base_url, timeout=WAIT_S))
    assert answers["old"] != answers["new"]
    return answers


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with running_engine(tiny_model_path) as server:
        yield server


@pytest.fixture
def client(engine, tiny_model_path):
    """Starts every test on the old weights, version "old", no session open."""
    client = EngineClient(engine.base_url, timeout=WAIT_S)
    client.update_weights_from_disk(tiny_model_path, weight_version="old")
    yield client
    if client.get_server_info()["weight_update_session"] is not None:
        client.end_weight_update()
    client.resume_memory_occupation(None)
    client.close()


def scored(client: EngineClient) -> tuple:
    """Greedy tokens, their logprobs and the prompt's: everything the weights decide."""
    out = client.generate(
        input_ids=PROMPT,
        sampling_params={"temperature": 0, "max_new_tokens": 6, "ignore_eos": True},
        return_logprob=True,
        logprob_start_len=0,
    )
    meta = out["meta_info"]
    return out["output_ids"], meta["output_token_logprobs"], meta["input_token_logprobs"]


def buckets(named: list) -> list[list]:
    size = -(-len(named) // BUCKETS)
    return [named[i : i + size] for i in range(0, len(named), size)]


def send(client: EngineClient, bucket: list, version: str | None = None) -> dict:
    with pack_inline(bucket) as payload:
        return client.update_weights_from_tensor([payload], load_format="inline", weight_version=version)


def snapshot(engine) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in engine.engine.model.named_parameters(remove_duplicate=False)}


def assert_holds(engine, named: list) -> None:
    params = dict(engine.engine.model.named_parameters())
    for name, tensor in named:
        assert torch.equal(params[name], tensor), name


def assert_identical(engine, before: dict[str, torch.Tensor]) -> None:
    after = snapshot(engine)
    assert after.keys() == before.keys()
    for name, tensor in before.items():
        assert torch.equal(after[name], tensor), f"{name} changed"


def staged(client: EngineClient) -> int:
    return client.get_server_info()["staged_weight_tensors"]


def test_a_push_whose_last_bucket_never_arrives_changes_nothing(engine, client, new_weights, reference, caplog):
    before = snapshot(engine)
    parts = buckets(new_weights)
    client.begin_weight_update()
    for bucket in parts[:-1]:
        answer = send(client, bucket)  # no version: staged
        assert answer["weight_version"] == "old" and answer["message"].startswith("staged")
    dropped = sum(map(len, parts[:-1]))
    assert staged(client) == dropped
    assert_identical(engine, before)
    with caplog.at_level(logging.WARNING, logger="loongsage.inference.embedded.engine"):
        assert client.end_weight_update() == {"success": True, "message": "Success"}  # the sender gave up
    assert f"discarded {dropped} staged weight tensor(s)" in caplog.text
    assert staged(client) == 0
    assert_identical(engine, before)
    assert client.get_weight_version() == "old"
    assert scored(client) == reference["old"]


def test_a_full_push_commits_at_its_last_bucket_and_generation_in_between_sees_only_the_old_weights(
    engine, client, new_weights, reference
):
    parts = buckets(new_weights)
    client.begin_weight_update()
    for bucket in parts[: len(parts) // 2]:
        send(client, bucket)
    # Half the push staged: a request is answered by the old weights entirely, under the old version.
    assert scored(client) == reference["old"]
    assert client.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": 1})["meta_info"]["weight_version"] == "old"
    cached = client.get_server_info()["prompt_cache_entries"]
    assert cached > 0
    for bucket in parts[len(parts) // 2 : -1]:
        send(client, bucket)
    assert client.get_server_info()["prompt_cache_entries"] == cached  # staging keeps the prompt cache
    assert client.get_weight_version() == "old"

    answer = send(client, parts[-1], "new")
    assert answer == {"success": True, "message": f"updated {len(new_weights)} tensors", "weight_version": "new"}
    info = client.get_server_info()
    assert (info["staged_weight_tensors"], info["prompt_cache_entries"]) == (0, 0)  # the old KV went with the commit
    assert_holds(engine, new_weights)
    assert client.get_weight_version() == "new"
    assert scored(client) == reference["new"]
    client.end_weight_update()  # nothing left to discard
    assert scored(client) == reference["new"]


def test_buckets_that_each_carry_a_version_each_commit(engine, client, new_weights, old_weights):
    """Older senders put the version on every bucket: each of those commits at once."""
    parts = buckets(new_weights)
    client.begin_weight_update()
    send(client, parts[0], "first")
    assert_holds(engine, parts[0])
    assert_holds(engine, old_weights[len(parts[0]) :])
    assert client.get_weight_version() == "first"
    client.end_weight_update()
    assert_holds(engine, parts[0])


def join(client: EngineClient, name: str) -> WeightUpdateGroup:
    port = free_ports("", 1)[0]
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(client.init_weights_update_group, "127.0.0.1", port, 1, 2, name, "gloo")
        group = WeightUpdateGroup("gloo", "127.0.0.1", port, 0, 2, name)
        assert answer.result(timeout=WAIT_S)["success"] is True
    return group


def distributed_body(bucket: list, group_name: str, version: str | None) -> dict:
    return {
        "names": [n for n, _ in bucket],
        "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in bucket],
        "shapes": [list(t.shape) for _, t in bucket],
        "group_name": group_name,
        "weight_version": version,
    }


def broadcast_bucket(engine, group: WeightUpdateGroup, bucket: list, version: str | None, leave_after: int | None = None):
    """Posts the bucket's update and broadcasts its tensors (only the first `leave_after`, then
    the sender leaves the group); returns the engine's answer."""
    result: dict = {}

    def post():
        result["answer"] = httpx.post(
            engine.base_url + "/update_weights_from_distributed",
            json=distributed_body(bucket, group.group_name, version),
            timeout=WAIT_S,
        )

    thread = threading.Thread(target=post)
    thread.start()
    for _, tensor in bucket[:leave_after]:
        group.broadcast(tensor.contiguous())
    if leave_after is not None:
        group.close()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    return result["answer"]


def test_a_distributed_push_that_fails_mid_way_keeps_the_old_weights_and_a_whole_one_commits(
    engine, client, new_weights, reference
):
    before = snapshot(engine)
    parts = buckets(new_weights)
    client.begin_weight_update()
    group = join(client, "atomic-broken")
    answer = broadcast_bucket(engine, group, parts[0], None)
    assert answer.status_code == 200 and answer.json()["message"].startswith(f"staged {len(parts[0])} tensors")
    broken = broadcast_bucket(engine, group, parts[1], None, leave_after=1)  # the sender dies mid-bucket
    assert broken.status_code == 500 and "model unchanged" in broken.json()["error"]["message"]
    assert staged(client) == len(parts[0])
    assert_identical(engine, before)
    client.end_weight_update()  # the failed push's session closes: what it staged goes
    assert staged(client) == 0
    assert_identical(engine, before)
    assert client.get_weight_version() == "old"
    assert scored(client) == reference["old"]

    client.begin_weight_update()  # the retry, over a new group
    group = join(client, "atomic-retry")
    for index, bucket in enumerate(parts):
        version = "new" if index == len(parts) - 1 else None
        assert broadcast_bucket(engine, group, bucket, version).status_code == 200
    client.end_weight_update()
    client.destroy_weights_update_group("atomic-retry")
    group.close()
    assert_holds(engine, new_weights)
    assert client.get_weight_version() == "new"
    assert scored(client) == reference["new"]


def test_a_released_engine_refuses_and_drops_what_was_staged_and_a_resumed_one_counts_writes_at_commit(
    engine, client, old_weights, new_weights, reference
):
    parts = buckets(old_weights)
    client.begin_weight_update()
    send(client, buckets(new_weights)[0])
    assert staged(client) > 0
    client.release_memory_occupation(["weights"])
    assert staged(client) == 0  # staged tensors would hold on to the memory given back
    with pytest.raises(EngineError, match="weights released") as refused:
        send(client, parts[0])
    assert refused.value.status == 503

    client.resume_memory_occupation(["weights"])
    n = client.get_server_info()["weights_not_loaded"]
    assert n == len(old_weights)
    for bucket in parts[:-1]:
        send(client, bucket)
        assert client.get_server_info()["weights_not_loaded"] == n  # staged is not written
    with pytest.raises(EngineError, match="parameters not loaded") as not_loaded:
        scored(client)
    assert not_loaded.value.status == 503
    send(client, parts[-1], "reloaded")
    assert client.get_server_info()["weights_not_loaded"] == 0
    client.end_weight_update()
    assert client.get_weight_version() == "reloaded"
    assert scored(client) == reference["old"]
