"""push_weights(transport="cuda_ipc") against a stand-in SGLang engine over real HTTP: what it is
sent (one dump per TP rank, load_format null, inside a session), and that a refusal leaves no
shared memory behind."""

from __future__ import annotations

import os

import pytest
import torch
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from loongsage.http_server import AppServer
from loongsage.transfer import PushFailed, push_weights
from loongsage.transfer.push import check_reach


def own_segments() -> list[str]:
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(f"torch_{os.getpid()}_"))


class RefusingEngine:
    """Reports `tp_size` ranks and refuses every tensor update before unpickling it, as SGLang does
    with a request it rejects up front: the dumps it was sent are never read."""

    def __init__(self, tp_size: int):
        self.events: list[str] = []
        self.bodies: list[dict] = []
        app = FastAPI()

        @app.get("/get_server_info")
        def server_info():
            return {"tp_size": tp_size}

        @app.post("/begin_weight_update")
        def begin():
            self.events.append("begin")
            return {"success": True, "message": "Success"}

        @app.post("/end_weight_update")
        def end():
            self.events.append("end")
            return {"success": True, "message": "Success"}

        @app.post("/update_weights_from_tensor")
        def update(body: dict):
            self.events.append("update")
            self.bodies.append(body)
            return JSONResponse({"success": False, "message": "refused before reading"}, status_code=400)

        self.server = AppServer(app, name="refusing-engine")
        self.url = self.server.start()


@pytest.fixture
def refusing():
    engine = RefusingEngine(tp_size=2)
    yield engine
    engine.server.stop()


def test_a_refused_push_sends_one_dump_per_rank_and_leaves_no_segment(refusing):
    assert own_segments() == []
    named = [("a", torch.randn(4, 4)), ("b", torch.ones(3, dtype=torch.bfloat16))]
    with pytest.raises(PushFailed, match=f"{refusing.url}: EngineError: .*HTTP 400: refused before reading") as refused:
        push_weights(named, [refusing.url], version=5, bucket_bytes=1 << 20, transport="cuda_ipc")
    assert list(refused.value.errors) == [refusing.url]
    assert refusing.events == ["begin", "update", "update", "end"]  # tried, retried alone once, never committed
    for body in refusing.bodies:
        assert body["load_format"] is None and body["weight_version"] is None  # the round commits the version
        entries = body["serialized_named_tensors"]
        assert len(entries) == 2 and entries[0] == entries[1]  # the same segment, a dump per rank
    assert own_segments() == []


def test_cuda_ipc_reaches_only_engines_on_this_machine():
    with pytest.raises(ValueError, match=r"weight_sync=cuda_ipc reaches only engines on the trainer's machine"):
        check_reach("cuda_ipc", ["http://127.0.0.1:3000", "http://10.0.0.2:3000"], "10.0.0.1")
    with pytest.raises(ValueError, match="cuda_ipc reaches only"):
        push_weights([("a", torch.ones(1))], ["http://10.0.0.2:3000"], 1, 1024, transport="cuda_ipc", sender_host="10.0.0.1")


def test_the_config_offers_cuda_ipc():
    from loongsage.config import Config, ConfigError, check

    cfg = Config()
    cfg.trainer.weight_sync = "cuda_ipc"
    check(cfg)
    cfg.trainer.weight_sync = "ipc"
    with pytest.raises(ConfigError, match=r"trainer.weight_sync='ipc' is not one of mesh, cuda_ipc, nccl, shm, gloo, inline"):
        check(cfg)
