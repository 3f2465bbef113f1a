"""The embedded engine's weight-update-group endpoints over real HTTP, with the test as rank 0.

The sender here is a real gloo group member in the test process; the engine joins from its
HTTP worker thread, as it would from a trainer on another machine.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch

from loongsage.inference.client import EngineClient, EngineError
from loongsage.inference.sglang.ports import free_ports
from loongsage.inference.weight_wire.process_group import WeightUpdateGroup
from loongsage.transfer.session import update_sessions
from tests.integration.inference.embedded.engine_support import running_engine

NORM = "model.norm.weight"  # a small parameter: one broadcast of hidden_size floats
EMBED = "model.embed_tokens.weight"


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    """Inside a weight-update session, as SGLang 0.5.23 takes distributed updates."""
    with running_engine(tiny_model_path) as server, update_sessions([EngineClient(server.base_url)]):
        yield server


@pytest.fixture
def client(engine):
    client = EngineClient(engine.base_url)
    yield client
    client.close()


def post(engine, path: str, body) -> httpx.Response:
    return httpx.post(engine.base_url + path, json=body, timeout=60)


def init_body(name: str, **changes) -> dict:
    body = {"master_address": "127.0.0.1", "master_port": 1, "rank_offset": 1, "world_size": 2, "group_name": name}
    return {**body, "backend": "gloo", **changes}


def join(client: EngineClient, name: str) -> WeightUpdateGroup:
    """The engine joins as rank 1 (its HTTP call returns once the group has formed) while the
    test joins as rank 0."""
    port = free_ports("", 1)[0]
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(client.init_weights_update_group, "127.0.0.1", port, 1, 2, name, "gloo")
        group = WeightUpdateGroup("gloo", "127.0.0.1", port, 0, 2, name)
        assert answer.result(timeout=60)["success"] is True
    return group


def send(client: EngineClient, group: WeightUpdateGroup, named: list[tuple[str, torch.Tensor]], version: str) -> dict:
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(
            client.update_weights_from_distributed,
            names=[n for n, _ in named],
            dtypes=[str(t.dtype).removeprefix("torch.") for _, t in named],
            shapes=[list(t.shape) for _, t in named],
            group_name=group.group_name,
            weight_version=version,
        )
        for _, tensor in named:
            group.broadcast(tensor)
        return answer.result(timeout=60)


def param(engine, name: str) -> torch.Tensor:
    return dict(engine.engine.model.named_parameters(remove_duplicate=False))[name].detach().clone()


def assert_bad(response: httpx.Response, field: str, *words: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    for word in words:
        assert word in error["message"], error


@pytest.mark.parametrize(
    ("changes", "field", "word"),
    [
        ({"backend": "nccl"}, "backend", "CPU"),
        ({"backend": "mpi"}, "backend", "unknown"),
        ({"master_address": ""}, "master_address", "non-empty"),
        ({"master_port": 70000}, "master_port", "outside"),
        ({"world_size": 1}, "world_size", "outside"),
        ({"rank_offset": 0}, "rank_offset", "outside"),  # rank 0 is the sender's
        ({"rank_offset": 2}, "rank_offset", "outside"),  # world_size 2: ranks 0 and 1
        ({"rank_offset": "1"}, "rank_offset", "integer"),
        ({"group_name": None}, "group_name", "required"),
    ],
)
def test_init_refuses_a_bad_body_without_joining(engine, client, changes, field, word):
    assert_bad(post(engine, "/init_weights_update_group", init_body("refused", **changes)), field, word)
    assert client.get_server_info()["weight_update_groups"] == []


def test_server_info_reports_one_tensor_parallel_rank(client):
    assert client.get_server_info()["tp_size"] == 1


def test_a_group_survives_refused_requests_and_then_updates(engine, client):
    group = join(client, "survivor")
    assert client.get_server_info()["weight_update_groups"] == ["survivor"]
    norm = param(engine, NORM)
    hidden = list(norm.shape)
    good = {"names": [NORM], "dtypes": ["float32"], "shapes": [hidden], "group_name": "survivor"}
    refusals = [
        ({**good, "dtypes": []}, "dtypes", "0 dtypes for 1 names"),
        ({**good, "shapes": [hidden, hidden]}, "shapes", "2 shapes for 1 names"),
        ({**good, "dtypes": ["float8"]}, "dtypes", "float8"),
        ({**good, "shapes": [[-1]]}, "shapes", "shapes[0]"),
        ({**good, "group_name": "nobody"}, "group_name", "nobody"),
        ({**good, "names": ["model.no_such.weight"]}, "names", "model.no_such.weight"),
        ({**good, "shapes": [[hidden[0] + 1]]}, "shapes", NORM),
        ({**good, "names": []}, "names", "at least one"),
        ({**good, "weight_version": 1.5}, "weight_version", "string"),
        ({**good, "weight_version": 8}, "weight_version", "string"),  # SGLang: a 422
        # one uint8 broadcast in SGLang; received per tensor it would hang the group
        ({**good, "load_format": "flattened_bucket"}, "load_format", "flattened_bucket"),
    ]
    for body, field, word in refusals:
        assert_bad(post(engine, "/update_weights_from_distributed", body), field, word)
    # A second init under the same name is refused and leaves the first group as it was.
    assert_bad(post(engine, "/init_weights_update_group", init_body("survivor")), "group_name", "already exists")
    assert torch.equal(param(engine, NORM), norm)

    # None of the refusals consumed a broadcast: the group is still in step.
    new = torch.linspace(0.5, 1.5, hidden[0])
    answer = send(client, group, [(NORM, new)], "after-refusals")
    assert answer["weight_version"] == "after-refusals"
    assert client.get_weight_version() == "after-refusals"
    assert torch.equal(param(engine, NORM), new)

    assert client.destroy_weights_update_group("survivor")["success"] is True
    group.close()
    assert client.get_server_info()["weight_update_groups"] == []
    assert_bad(post(engine, "/update_weights_from_distributed", good), "group_name", "survivor")
    assert_bad(post(engine, "/destroy_weights_update_group", {"group_name": "survivor"}), "group_name", "survivor")


def test_a_bucket_applies_all_or_nothing_and_in_order(engine, client):
    """Two tensors of different shapes in one request: each lands under its own name (the order
    of `names` is the order of the broadcasts)."""
    group = join(client, "ordered")
    norm, embed = param(engine, NORM), param(engine, EMBED)
    new_norm, new_embed = norm * 2 + 1, embed.flip(0)
    answer = send(client, group, [(EMBED, new_embed), (NORM, new_norm)], version="7")
    assert answer == {"success": True, "message": "updated 2 tensors", "weight_version": "7"}
    assert torch.equal(param(engine, EMBED), new_embed)
    assert torch.equal(param(engine, NORM), new_norm)
    client.destroy_weights_update_group("ordered")
    group.close()


def test_outside_a_session_an_update_is_refused_before_receiving(engine, client):
    """SGLang 0.5.23's refusal, answered before the receive: the group stays in step."""
    group = join(client, "sessionless")
    norm = param(engine, NORM)
    body = {"names": [NORM], "dtypes": ["float32"], "shapes": [list(norm.shape)], "group_name": "sessionless"}
    client.end_weight_update()
    try:
        refused = post(engine, "/update_weights_from_distributed", body)
    finally:
        client.begin_weight_update()
    assert refused.status_code == 400
    assert refused.json() == {
        "success": False,
        "message": "update_weights_from_distributed must run between begin_weight_update() and end_weight_update()",
    }
    assert torch.equal(param(engine, NORM), norm)
    new = torch.full_like(norm, 0.5)
    assert send(client, group, [(NORM, new)], "in-session")["weight_version"] == "in-session"
    assert torch.equal(param(engine, NORM), new)
    client.destroy_weights_update_group("sessionless")
    group.close()


def test_a_sender_that_leaves_mid_bucket_breaks_the_group_not_the_model(engine, client):
    group = join(client, "abandoned")
    norm, embed = param(engine, NORM), param(engine, EMBED)
    version = client.get_weight_version()
    result: dict = {}

    def update():
        try:
            client.update_weights_from_distributed(
                names=[NORM, EMBED],
                dtypes=["float32", "float32"],
                shapes=[list(norm.shape), list(embed.shape)],
                group_name="abandoned",
                weight_version="never",
            )
        except EngineError as exc:
            result["error"] = exc

    thread = threading.Thread(target=update)
    thread.start()
    group.broadcast(norm + 1)  # the first of two tensors, then the sender goes away
    group.close()
    thread.join(60)
    assert not thread.is_alive()
    error = result["error"]
    assert error.status == 500
    assert "'abandoned' failed receiving 'model.embed_tokens.weight' (2 of 2)" in error.server_message
    assert "model unchanged" in error.server_message
    assert torch.equal(param(engine, NORM), norm)
    assert client.get_weight_version() == version
    assert client.get_server_info()["weight_update_groups"] == []


def test_an_update_while_weights_are_released_is_refused_before_receiving(tiny_model_path):
    with running_engine(tiny_model_path) as engine:
        client = EngineClient(engine.base_url)
        client.begin_weight_update()
        group = join(client, "released")
        norm = param(engine, NORM)
        client.release_memory_occupation(["weights"])
        body = {"names": [NORM], "dtypes": ["float32"], "shapes": [list(norm.shape)], "group_name": "released"}
        refused = post(engine, "/update_weights_from_distributed", body)
        assert refused.status_code == 503 and "resume_memory_occupation" in refused.text
        # Nothing was received: after the resume the same group carries the update.
        client.resume_memory_occupation(["weights"])
        new = torch.full_like(norm, 0.25)
        assert send(client, group, [(NORM, new)], "resumed")["weight_version"] == "resumed"
        assert torch.equal(param(engine, NORM), new)
        client.destroy_weights_update_group("released")
        group.close()
