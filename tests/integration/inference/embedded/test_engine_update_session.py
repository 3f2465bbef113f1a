"""The embedded engine's weight-update sessions and weight versions over real HTTP, as SGLang
0.5.23 has them: /update_weights_from_tensor (and _from_distributed, see
test_weight_group_http) only between /begin_weight_update and /end_weight_update, one session
at a time, and `weight_version` a string."""

from __future__ import annotations

import httpx
import pytest
import torch

from loongsage.inference.client import EngineClient, EngineError
from loongsage.transfer import push_weights
from loongsage.transfer.session import update_sessions
from loongsage.transfer.transports import pack_inline
from tests.integration.inference.embedded.engine_support import running_engine

NORM = "model.norm.weight"


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with running_engine(tiny_model_path) as server:
        yield server


@pytest.fixture
def client(engine):
    client = EngineClient(engine.base_url)
    yield client
    if client.get_server_info()["weight_update_session"] is not None:  # a failed test's: not the next one's
        client.end_weight_update()
    client.close()


def post(engine, path: str, body) -> httpx.Response:
    return httpx.post(engine.base_url + path, json=body, timeout=60)


def norm(engine) -> torch.Tensor:
    return dict(engine.engine.model.named_parameters())[NORM].detach().clone()


def tensor_body(value: torch.Tensor, **changes) -> dict:
    with pack_inline([(NORM, value)]) as payload:
        return {"serialized_named_tensors": [payload], "load_format": "inline", **changes}


def test_a_tensor_update_outside_a_session_is_refused_as_sglang_refuses_it(engine, client):
    before, version = norm(engine), client.get_weight_version()
    refused = post(engine, "/update_weights_from_tensor", tensor_body(before + 1, weight_version="never"))
    assert refused.status_code == 400
    assert refused.json() == {
        "success": False,
        "message": "update_weights_from_tensor must run between begin_weight_update() and end_weight_update()",
    }
    assert torch.equal(norm(engine), before) and client.get_weight_version() == version


def test_a_session_opens_once_takes_updates_and_closes_once(engine, client):
    before = norm(engine)
    assert client.begin_weight_update() == {"success": True, "message": "Success"}
    assert client.get_server_info()["weight_update_session"] == "all"
    with pytest.raises(EngineError, match="already open; call end_weight_update") as twice:
        client.begin_weight_update()
    assert twice.value.status == 400
    answer = post(engine, "/update_weights_from_tensor", tensor_body(before * 2, weight_version="s1"))
    assert answer.status_code == 200 and answer.json()["weight_version"] == "s1"
    assert client.end_weight_update() == {"success": True, "message": "Success"}
    with pytest.raises(EngineError, match="no weight-update session is open") as again:
        client.end_weight_update()
    assert again.value.status == 400
    # Closed, the next update is refused again.
    assert post(engine, "/update_weights_from_tensor", tensor_body(before, weight_version="s2")).status_code == 400
    assert torch.equal(norm(engine), before * 2) and client.get_weight_version() == "s1"
    with update_sessions([client]):
        client.update_weights_from_tensor(**tensor_body(before, weight_version="s2"))
    assert torch.equal(norm(engine), before)


@pytest.mark.parametrize(
    ("body", "field"),
    [({"selector": "both"}, "selector"), ({"selector": None}, "selector"), (["all"], "body")],
)
def test_a_bad_begin_body_is_400_naming_the_field_and_opens_nothing(engine, client, body, field):
    refused = post(engine, "/begin_weight_update", body)
    assert refused.status_code == 400 and refused.json()["error"]["field"] == field
    assert client.get_server_info()["weight_update_session"] is None


def test_every_selector_opens_a_session(engine, client):
    for selector in ("target", "draft", "all"):
        client.begin_weight_update(selector)
        assert client.get_server_info()["weight_update_session"] == selector
        client.end_weight_update()


def test_a_disk_update_needs_no_session(engine, client, tiny_model_path):
    client.update_weights_from_disk(tiny_model_path, weight_version="disk")
    assert client.get_weight_version() == "disk"


@pytest.mark.parametrize("version", [7, 7.0, True, ["7"], {"v": 7}])
def test_a_weight_version_that_is_not_a_string_is_400_naming_it(engine, client, tiny_model_path, version):
    before, current = norm(engine), client.get_weight_version()
    with update_sessions([client]):
        refused = post(engine, "/update_weights_from_tensor", tensor_body(before + 1, weight_version=version))
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "weight_version"
    refused = post(engine, "/update_weights_from_disk", {"model_path": tiny_model_path, "weight_version": version})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "weight_version"
    assert torch.equal(norm(engine), before) and client.get_weight_version() == current


def test_a_null_weight_version_keeps_the_current_one(engine, client):
    current = client.get_weight_version()
    with update_sessions([client]):
        assert post(engine, "/update_weights_from_tensor", tensor_body(norm(engine), weight_version=None)).status_code == 200
    assert client.get_weight_version() == current


def test_push_weights_opens_and_closes_the_session_also_when_a_bucket_is_refused(engine, client):
    before = norm(engine)
    push_weights([(NORM, before + 1)], [engine.base_url], 11, 2**20, "inline")
    assert client.get_weight_version() == "11" and torch.equal(norm(engine), before + 1)
    assert client.get_server_info()["weight_update_session"] is None

    with pytest.raises(Exception, match="model.no_such.weight"):  # the push's own error, naming the engine's refusal
        push_weights([(NORM, before), ("model.no_such.weight", torch.zeros(2))], [engine.base_url], 12, 1, "inline")
    assert client.get_server_info()["weight_update_session"] is None
    # Bucket 1 (one tensor a bucket) was staged before the refusal, and discarded when the session
    # closed: the engine keeps the weights and version it had.
    assert torch.equal(norm(engine), before + 1) and client.get_weight_version() == "11"
    assert client.get_server_info()["staged_weight_tensors"] == 0


def test_push_weights_closes_a_session_left_open_and_pushes(engine, client):
    client.begin_weight_update()  # a push that died without closing it
    push_weights([(NORM, norm(engine) * 3)], [engine.base_url], 13, 2**20, "inline")
    assert client.get_weight_version() == "13"
    assert client.get_server_info()["weight_update_session"] is None
